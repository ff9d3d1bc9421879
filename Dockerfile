# soniq-sidecar image: a static, cgo-free binary on distroless, running as non-root.
#
#   docker build --build-arg VERSION=v0.1.0 -t ghcr.io/soniq-dev/soniq-sidecar:v0.1.0 .
#
# The binary is built by `make build` (the Makefile holds the one build command;
# `make docker-steps` runs it outside Docker and checks the result is static).
# The image alone runs no handlers: see docs/operations.md for copying the binary
# into a Python or Node application image, or running it as a second container.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so source edits keep this layer cached.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION reaches the Makefile's `VERSION ?=` through the environment
# (.git is not in the build context, so `git describe` cannot supply it).
ARG VERSION=dev
RUN make build

FROM gcr.io/distroless/static:nonroot
COPY --from=build /src/bin/soniq-sidecar /soniq-sidecar
# 65532: distroless's nonroot user.
USER nonroot:nonroot
# /metrics, /healthz and /readyz (--metrics-addr, default :9464).
EXPOSE 9464
ENTRYPOINT ["/soniq-sidecar"]
CMD ["run"]
