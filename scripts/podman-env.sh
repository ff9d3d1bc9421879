#!/usr/bin/env bash
# Podman for the image builds and pod tests (scripts/images.sh, make test-pod), on a machine with
# no Docker engine and no reachable image registry.
#
#   scripts/podman-env.sh env          # prints `export CONTAINERS_CONF=...` (eval it)
#   scripts/podman-env.sh bases        # makes the local base images (cached); prints build args
#   scripts/podman-env.sh exec CMD...  # runs CMD with the environment set
#
# The environment: a containers.conf of our own, named by CONTAINERS_CONF, with
#   - default_ulimits = []: some VMs refuse to raise RLIMIT_NPROC/NOFILE, and every start fails;
#   - the runc runtime (SONIQ_PODMAN_RUNTIME, default runc when installed): crun refuses a hybrid
#     cgroup v1/v2 layout.
#
# The bases stand in for the public images the Dockerfiles name by default, which need a
# registry: each is made from a Debian bookworm root file system that mmdebstrap builds from the
# machine's own apt sources (only plain http is needed: no registry, no TLS), then shaped to the
# contract the Dockerfiles rely on:
#   soniq-local/golang:1.26       the host's Go toolchain (same version as go.mod's), make; no
#                                 network inside a build, so GOPROXY=off and scripts/images.sh
#                                 mounts the host's module cache (filled first with go mod download)
#   soniq-local/static:nonroot    like gcr.io/distroless/static:nonroot: no shell, user nonroot
#                                 (65532), CA certificates and time zones, /tmp
#   soniq-local/python:3.11       Debian's python3 (3.11): `python` and `pip` on PATH, pip
#                                 allowed to install into it as in the python image
#   soniq-local/node:host         the host's node and npm in /usr/local, a `node` user 1000, as in
#                                 the node image
# Each carries a label with a hash of its recipe (its function below and, for Go, `go version`): a
# changed recipe is remade, an unchanged one is reused, so re-runs take seconds.
set -euo pipefail

SONIQ_PODMAN_CACHE="${SONIQ_PODMAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/soniq-podman}"
BASE_PREFIX="${SONIQ_BASE_PREFIX:-localhost/soniq-local}"
APT_SOURCES="${SONIQ_APT_SOURCES:-}"

fatal() { echo "FATAL: ${SAY_PREFIX:-podman-env}: $*" >&2; exit 1; }
say() { echo "${SAY_PREFIX:-podman-env}: $*" >&2; }

podman_env() {
  local tool
  for tool in podman buildah; do
    command -v "$tool" >/dev/null 2>&1 || fatal "$tool is required (apt-get install podman buildah runc catatonit mmdebstrap)"
  done
  # A pod's infra container: podman builds its pause image from catatonit, no registry needed.
  command -v catatonit >/dev/null 2>&1 || [[ -x /usr/libexec/podman/catatonit ]] \
    || fatal "catatonit is required for pods (apt-get install catatonit)"
  local runtime="${SONIQ_PODMAN_RUNTIME:-}"
  if [[ -z $runtime ]]; then
    runtime=$(command -v runc || true)
    [[ -n $runtime ]] || runtime=$(command -v crun || true)
    [[ -n $runtime ]] || fatal "no OCI runtime: apt-get install runc"
  fi
  mkdir -p "$SONIQ_PODMAN_CACHE"
  local conf="$SONIQ_PODMAN_CACHE/containers.conf"
  cat >"$conf.tmp" <<CONF
# Written by scripts/podman-env.sh.
[containers]
default_ulimits = []

[engine]
runtime = "$runtime"
CONF
  mv "$conf.tmp" "$conf"
  export CONTAINERS_CONF="$conf"
}

# A recipe's hash: the text of the function that makes the base, plus extra words (the hash of
# the base it starts from, the Go version).
recipe() { { declare -f "$1"; printf '%s\n' "${@:2}"; } | sha256sum | cut -c1-16; }

fresh() { # image hash: true when image exists with that recipe hash
  [[ "$(podman image inspect --format '{{index .Labels "soniq.recipe"}}' "$1" 2>/dev/null)" == "$2" ]]
}

# The Debian root file system every other base starts from: minbase, CA certificates, make.
debian_base() {
  local image="$BASE_PREFIX/debian:bookworm" hash
  hash=$(recipe debian_base)
  if fresh "$image" "$hash"; then return; fi
  command -v mmdebstrap >/dev/null 2>&1 || fatal "mmdebstrap is required to make the Debian base (apt-get install mmdebstrap)"
  local sources="$APT_SOURCES"
  if [[ -z $sources ]]; then
    # The machine's own Debian sources (deb822 or one-line form).
    for sources in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list ""; do
      [[ -z $sources || ( -s $sources && $(grep -cE '^(URIs:|deb )' "$sources") -gt 0 ) ]] && break
    done
    [[ -n $sources ]] || fatal "no Debian apt sources found on this machine (set SONIQ_APT_SOURCES to a sources file)"
  fi
  say "making $image with mmdebstrap (bookworm, from $sources): once per machine, a few minutes"
  local tar="$SONIQ_PODMAN_CACHE/debian-bookworm.tar"
  local start=$SECONDS
  mmdebstrap --variant=minbase --include=ca-certificates,make \
    --aptopt='Acquire::Languages "none"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$tar" "$sources" >"$SONIQ_PODMAN_CACHE/mmdebstrap.log" 2>&1 \
    || { tail -n 30 "$SONIQ_PODMAN_CACHE/mmdebstrap.log" >&2; fatal "mmdebstrap failed (log: $SONIQ_PODMAN_CACHE/mmdebstrap.log)"; }
  podman import -q --change 'CMD ["/bin/bash"]' --change "LABEL soniq.recipe=$hash" "$tar" "$image" >/dev/null \
    || fatal "podman import of $tar failed"
  rm -f "$tar"
  say "$image made in $(( SECONDS - start ))s"
}

# A derived base: FROM the Debian base, the Containerfile on stdin.
derived() { # image hash
  local image=$1 hash=$2
  say "making $image"
  podman build -q --pull=never --network=host --label "soniq.recipe=$hash" \
    --build-arg "DEBIAN=$BASE_PREFIX/debian:bookworm" -t "$image" -f - "$SONIQ_PODMAN_CACHE" >/dev/null \
    || fatal "building $image failed"
}

python_base() {
  local image="$BASE_PREFIX/python:3.11" hash
  hash=$(recipe python_base "$(recipe debian_base)")
  fresh "$image" "$hash" && return
  derived "$image" "$hash" <<'EOF'
ARG DEBIAN
FROM ${DEBIAN}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-pip python-is-python3 >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
ENV PIP_ROOT_USER_ACTION=ignore
CMD ["python3"]
EOF
}

# The host's Node runtime (node and its npm), copied into the Debian base where the node image
# has them (/usr/local): Debian's own npm is some 400 packages, minutes to install.
node_base() {
  local image="$BASE_PREFIX/node:host" hash node npm
  node=$(command -v node || true)
  [[ -n $node ]] || fatal "node is required (the Node base copies the host's runtime)"
  node=$(readlink -f "$node")
  npm="$("$node" "$(dirname "$node")/../lib/node_modules/npm/bin/npm-cli.js" root -g 2>/dev/null || true)/npm"
  [[ -f $npm/bin/npm-cli.js ]] || npm="$(npm root -g 2>/dev/null)/npm"
  [[ -f $npm/bin/npm-cli.js ]] || fatal "npm is required (the Node base copies the host's)"
  hash=$(recipe node_base "$(recipe debian_base)" "$("$node" --version)" "$(node "$npm/bin/npm-cli.js" --version)")
  fresh "$image" "$hash" && return
  say "making $image from the host's node $("$node" --version)"
  local c
  c=$(buildah from --pull-never "$BASE_PREFIX/debian:bookworm")
  buildah copy -q "$c" "$node" /usr/local/bin/node >/dev/null
  buildah copy -q "$c" "$npm" /usr/local/lib/node_modules/npm >/dev/null
  buildah run "$c" -- sh -c 'ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && groupadd --gid 1000 node && useradd --uid 1000 --gid 1000 --create-home --shell /bin/bash node \
    && node --version >/dev/null && npm --version >/dev/null' \
    || { buildah rm "$c" >/dev/null; fatal "the host's node does not run in the Debian base (another libc?)"; }
  buildah config --cmd node --label "soniq.recipe=$hash" "$c"
  buildah commit -q --rm "$c" "$image" >/dev/null
}

# The host's Go toolchain, copied into the Debian base.
golang_base() {
  local image="$BASE_PREFIX/golang:1.26" hash goroot
  command -v go >/dev/null 2>&1 || fatal "go is required (the Go builder base copies the host's toolchain)"
  goroot=$(go env GOROOT)
  hash=$(recipe golang_base "$(recipe debian_base)" "$(go version)")
  fresh "$image" "$hash" && return
  say "making $image from $(go version | cut -d' ' -f3) in $goroot"
  local c
  c=$(buildah from --pull-never "$BASE_PREFIX/debian:bookworm")
  buildah copy -q "$c" "$goroot" /usr/local/go >/dev/null
  buildah config --env GOPATH=/go --env GOTOOLCHAIN=local --env GOPROXY=off \
    --env PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --workingdir /go --label "soniq.recipe=$hash" "$c"
  buildah commit -q --rm "$c" "$image" >/dev/null
}

# distroless/static's contents, from scratch: the users, /tmp, CA certificates and time zones.
static_base() {
  local image="$BASE_PREFIX/static:nonroot" hash
  hash=$(recipe static_base "$(recipe debian_base)")
  fresh "$image" "$hash" && return
  say "making $image"
  local deb c mnt etc
  deb=$(buildah from --pull-never "$BASE_PREFIX/debian:bookworm")
  c=$(buildah from scratch)
  mnt=$(buildah mount "$deb")
  etc=$(mktemp -d)
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$etc/group"
  printf 'hosts: files dns\n' >"$etc/nsswitch.conf"
  buildah copy -q "$c" "$etc" /etc >/dev/null
  buildah copy -q "$c" "$mnt/etc/ssl/certs/ca-certificates.crt" /etc/ssl/certs/ca-certificates.crt >/dev/null
  buildah copy -q "$c" "$mnt/usr/share/zoneinfo" /usr/share/zoneinfo >/dev/null
  rm -rf "$etc"
  # /tmp (1777) and the nonroot user's home, which a scratch image lacks.
  local dirs
  dirs=$(mktemp -d)
  mkdir -p "$dirs/tmp" "$dirs/home/nonroot"
  chmod 1777 "$dirs/tmp"; chmod 0700 "$dirs/home/nonroot"
  buildah copy -q "$c" "$dirs" / >/dev/null
  rm -rf "$dirs"
  buildah umount "$deb" >/dev/null; buildah rm "$deb" >/dev/null
  buildah config --user 65532:65532 --workingdir /home/nonroot --label "soniq.recipe=$hash" "$c"
  buildah commit -q --rm "$c" "$image" >/dev/null
}

bases() {
  # One maker at a time: .ci/run starts this early in the background and make test-pod's
  # scripts/images.sh then waits here for it instead of making the same images beside it.
  exec 9>"$SONIQ_PODMAN_CACHE/bases.lock"
  flock 9 || fatal "cannot lock $SONIQ_PODMAN_CACHE/bases.lock"
  debian_base
  # Python's apt install (downloads and unpacking) beside the others.
  local py
  python_base & py=$!
  golang_base
  static_base
  node_base
  wait "$py" || fatal "making the Python base failed"
  # The build arguments that select them (scripts/images.sh passes these).
  echo "GO_IMAGE=$BASE_PREFIX/golang:1.26"
  echo "RUNTIME_IMAGE=$BASE_PREFIX/static:nonroot"
  echo "PYTHON_IMAGE=$BASE_PREFIX/python:3.11"
  echo "NODE_IMAGE=$BASE_PREFIX/node:host"
}

# Sourced: define the functions only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

case "${1:-}" in
env) podman_env; echo "export CONTAINERS_CONF='$CONTAINERS_CONF'" ;;
bases) podman_env; bases ;;
exec) shift; [[ $# -gt 0 ]] || fatal "usage: $0 exec CMD..."; podman_env; exec "$@" ;;
*) echo "usage: $0 env | bases | exec CMD..." >&2; exit 2 ;;
esac
