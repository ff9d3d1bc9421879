# soniq-sidecar image: a static, cgo-free binary on distroless, running as non-root.
#
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/soniq-dev/soniq-sidecar:v0.1.0 .
#
# The base images are build arguments whose defaults are the public images: GO_IMAGE (any
# image with Go 1.26 and make) and RUNTIME_IMAGE (one with a user `nonroot`, 65532).
# scripts/images.sh (`make images`) passes local stand-ins where no registry is reachable.
#
# The binary is built by `make build` (the Makefile holds the one build command;
# `make docker-steps` runs it outside Docker and checks the result is static).
# The image alone runs no handlers: see docs/operations.md for copying the binary
# into a Python or Node application image, or running it as a second container.

ARG GO_IMAGE=golang:1.26
ARG RUNTIME_IMAGE=gcr.io/distroless/static:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Dependencies first, so source edits keep this layer cached.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION reaches the Makefile's `VERSION ?=` through the environment
# (.git is not in the build context, so `git describe` cannot supply it).
ARG VERSION=dev
RUN make build

FROM ${RUNTIME_IMAGE}
COPY --from=build /src/bin/soniq-sidecar /soniq-sidecar
# 65532: distroless's nonroot user, by number: the kubelet starts a container under
# runAsNonRoot only when it can tell the user is not root, which a name does not tell it.
USER 65532:65532
# /metrics, /healthz and /readyz (--metrics-addr, default :9464).
EXPOSE 9464
ENTRYPOINT ["/soniq-sidecar"]
CMD ["run"]
