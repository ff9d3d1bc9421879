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
# Local bases are never pulled (a missing one is an error, not a registry lookup); public ones
# are pulled when missing.
PULL=missing
if [[ -z "${SONIQ_IMAGES_PUBLIC_BASES:-}" ]]; then
  args_out=$(bases) || exit 1
  while IFS='=' read -r k v; do base[$k]=$v; done <<<"$args_out"
  PULL=never
fi
for k in GO_IMAGE RUNTIME_IMAGE PYTHON_IMAGE NODE_IMAGE; do
  [[ -n "${!k:-}" ]] && base[$k]=${!k}
done
args() { local k; for k in "$@"; do [[ -n "${base[$k]:-}" ]] && printf -- '--build-arg\n%s=%s\n' "$k" "${base[$k]}"; done; }

build() { # image dockerfile context [podman build args...]
  local image=$1 df=$2 ctx=$3; shift 3
  local t=$SECONDS
  podman build -q --pull="$PULL" --format docker -f "$df" -t "$image" "$@" "$ctx" >/dev/null \
    || fatal "podman build of $df failed (rerun without -q: podman build -f $df $ctx)"
  say "built $image from $df in $(( SECONDS - t ))s"
}

# The sidecar: the Go builder stage with the host's caches mounted copy-on-write (:O).
go mod download || fatal "go mod download failed"
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
mapfile -t a < <(args GO_IMAGE RUNTIME_IMAGE)
build "$SIDECAR_IMAGE" Dockerfile . "${a[@]}" --build-arg "VERSION=$version" \
  -v "$(go env GOMODCACHE):/go/pkg/mod:O" -v "$(go env GOCACHE):/root/.cache/go-build:O"

# The Python worker: a wheelhouse for the base's Python (the SDK's build backend and its unix
# extra) and a pip.conf that installs from it alone.
deps="$SONIQ_PODMAN_CACHE/deps"
mkdir -p "$deps/wheels" "$deps/npm"
pyimage=${base[PYTHON_IMAGE]:-python:3.11.7-slim-bookworm}
pyver=$(podman run --rm --pull="$PULL" --user 0 --entrypoint '' "$pyimage" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
  || fatal "cannot run python3 in $pyimage"
python3 -c '
import sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))
print("\n".join(d["build-system"]["requires"] + d["project"]["optional-dependencies"]["unix"]))
' sdk/python/pyproject.toml >"$deps/requirements.txt" || fatal "reading sdk/python/pyproject.toml"
arch=$(uname -m)
python3 -m pip download -q --disable-pip-version-check -d "$deps/wheels" --only-binary=:all: \
  --implementation cp --python-version "$pyver" --abi "cp${pyver/./}" --abi abi3 --abi none \
  --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" --platform "manylinux_2_28_$arch" --platform any \
  -r "$deps/requirements.txt" || fatal "pip download of the SDK's dependencies for Python $pyver failed"
printf '[global]\nno-index = true\nfind-links = /soniq-build/wheels\n' >"$deps/pip.conf"
mapfile -t a < <(args PYTHON_IMAGE)
build "$PYTHON_EXAMPLES_IMAGE" examples/python/Dockerfile . "${a[@]}" \
  -v "$deps/wheels:/soniq-build/wheels:ro" -v "$deps/pip.conf:/etc/pip.conf:ro"

# The Node worker: an npm cache filled by `npm ci` of the same lock file on the host (in a
# scratch copy of the repository's layout: the examples depend on ../../sdk/node), and the
# base's global npmrc saying offline.
nodeimage=${base[NODE_IMAGE]:-node:20.20.2-bookworm-slim}
npmrc=$(podman run --rm --pull="$PULL" --user 0 --entrypoint '' "$nodeimage" npm config get globalconfig) \
  || fatal "cannot run npm in $nodeimage"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/sdk" "$scratch/examples/node"
tar -C sdk --exclude=node_modules -cf - node | tar -C "$scratch/sdk" -xf -
cp examples/node/package.json examples/node/package-lock.json "$scratch/examples/node/"
(cd "$scratch/examples/node" && npm ci -s --cache "$deps/npm" --install-links --omit=dev --ignore-scripts --no-audit --no-fund) \
  || fatal "npm ci (filling the npm cache for the Node image) failed"
printf 'offline=true\ncache=/soniq-build/npm\n' >"$deps/npmrc"
mapfile -t a < <(args NODE_IMAGE)
build "$NODE_EXAMPLES_IMAGE" examples/node/Dockerfile . "${a[@]}" \
  -v "$deps/npm:/soniq-build/npm:O" -v "$deps/npmrc:$npmrc:ro"

# The single-image topology (deploy/kubernetes/deployment.yaml) as docs/operations.md ("Docker")
# builds it: an application image (the Python worker's), the sidecar's binary copied in from
# its image, and the application's manifest at /app/soniq-handlers.yaml.
build "$PYTHON_APP_IMAGE" - examples/python --build-arg "APP_IMAGE=$PYTHON_EXAMPLES_IMAGE" \
  --build-arg "SIDECAR_IMAGE=$SIDECAR_IMAGE" <<'EOF'
ARG APP_IMAGE
ARG SIDECAR_IMAGE
FROM ${SIDECAR_IMAGE} AS sidecar
FROM ${APP_IMAGE}
COPY --from=sidecar /soniq-sidecar /usr/local/bin/soniq-sidecar
COPY manifest.yaml /app/soniq-handlers.yaml
EXPOSE 9464
EOF

# Non-root, and the sizes.
for image in "$SIDECAR_IMAGE" "$PYTHON_EXAMPLES_IMAGE" "$NODE_EXAMPLES_IMAGE" "$PYTHON_APP_IMAGE"; do
  user=$(podman image inspect --format '{{.Config.User}}' "$image")
  case "${user%%:*}" in
  "" | 0 | root) fatal "$image runs as root (USER '${user}')" ;;
  esac
  size=$(podman image inspect --format '{{.Size}}' "$image")
  printf '%-40s %6d MB  USER %s\n' "$image" $(( size / 1000000 )) "$user"
done
say "images made in $(( SECONDS - start ))s"
