#!/usr/bin/env bash
# Builds the repository's images with podman from its own Dockerfiles (`make images`):
#
#   localhost/soniq-sidecar:dev           Dockerfile (the sidecar: distroless-like, nonroot)
#   localhost/soniq-python-examples:dev   examples/python/Dockerfile (attach-mode worker)
#   localhost/soniq-node-examples:dev     examples/node/Dockerfile (attach-mode worker)
#   localhost/soniq-python-app:dev        the single-image topology of docs/operations.md
#                                         ("Docker"): the Python worker image with the
#                                         sidecar's binary copied in and a manifest
#
# then checks each runs as a non-root user and prints their sizes.
#
# Bases: every Dockerfile takes its base images as build arguments whose defaults are the
# public images. Without a registry (the default here) the local stand-ins of
# scripts/podman-env.sh are made and passed; SONIQ_IMAGES_PUBLIC_BASES=1 builds on the
# defaults instead (a machine that can pull them). Each BASE=IMAGE in the environment
# (GO_IMAGE, RUNTIME_IMAGE, PYTHON_IMAGE, NODE_IMAGE) overrides one.
#
# No network inside a build: a build step cannot reach the module proxy, PyPI or npm here
# (TLS to them is only trusted on the host). So the host fetches what the builds download and
# mounts it for the build steps only (nothing of it stays in an image):
#   Go      the host's module cache (after `go mod download`) and build cache, copy-on-write
#   Python  a wheelhouse (`pip download` for the base's Python) and a pip.conf pointing at it
#   Node    an npm cache filled by `npm ci` on the host and an npmrc that says offline
# With public bases and a network the builds fetch as any docker build does.
#
# SONIQ_IMAGE_TAG (default dev) tags the images.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/podman-env.sh
source scripts/podman-env.sh
podman_env
SAY_PREFIX=images

TAG="${SONIQ_IMAGE_TAG:-dev}"
SIDECAR_IMAGE="localhost/soniq-sidecar:$TAG"
PYTHON_EXAMPLES_IMAGE="localhost/soniq-python-examples:$TAG"
NODE_EXAMPLES_IMAGE="localhost/soniq-node-examples:$TAG"
PYTHON_APP_IMAGE="localhost/soniq-python-app:$TAG"

start=$SECONDS
declare -A base=()
if [[ -z "${SONIQ_IMAGES_PUBLIC_BASES:-}" ]]; then
  while IFS='=' read -r k v; do base[$k]=$v; done < <(bases)
fi
for k in GO_IMAGE RUNTIME_IMAGE PYTHON_IMAGE NODE_IMAGE; do
  [[ -n "${!k:-}" ]] && base[$k]=${!k}
done
args() { local k; for k in "$@"; do [[ -n "${base[$k]:-}" ]] && printf -- '--build-arg\n%s=%s\n' "$k" "${base[$k]}"; done; }

build() { # image dockerfile context [podman build args...]
  local image=$1 df=$2 ctx=$3; shift 3
  local t=$SECONDS
  podman build -q --pull=never -f "$df" -t "$image" "$@" "$ctx" >/dev/null \
    || fatal "podman build of $df failed (rerun without -q: podman build -f $df $ctx)"
  say "built $image from $df in $(( SECONDS - t ))s"
}

# The sidecar: the Go builder stage with the host's caches mounted copy-on-write (:O).
go mod download || fatal "go mod download failed"
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
mapfile -t a < <(args GO_IMAGE RUNTIME_IMAGE)
build "$SIDECAR_IMAGE" Dockerfile . "${a[@]}" --build-arg "VERSION=$version" \
  -v "$(go env GOMODCACHE):/go/pkg/mod:O" -v "$(go env GOCACHE):/root/.cache/go-build:O"

say "images made in $(( SECONDS - start ))s"
