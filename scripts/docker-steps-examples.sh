#!/usr/bin/env bash
# What the handler images of the examples (examples/node/Dockerfile, examples/python/Dockerfile)
# must be, checked without a Docker engine: every base image pinned to a version, a non-root
# numeric USER, no sidecar binary, every file they COPY present in the build context, a CMD in
# exec form serving a socket in /run/soniq with --listen, and that CMD (and the HEALTHCHECK
# probe) really working: run here, from the build context, on a temporary socket path, it must
# listen on a 0660 socket, the probe must pass, and SIGTERM must end it with status 0 and the
# socket removed. The build context is the repository's root; the CMD runs here from the
# Dockerfile's own directory, where the examples' manifests run them too. Needs the examples' dependencies (make deps-python deps-node) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "docker-steps-examples: $*" >&2; exit 1; }

# The JSON array of an exec-form instruction (CMD or HEALTHCHECK ... CMD), one element per line.
exec_form() { # file instruction-regex
  python3 - "$1" "$2" <<'PY'
import json, re, sys
path, pattern = sys.argv[1], sys.argv[2]
lines = [l for l in open(path).read().replace("\\\n", " ").splitlines() if re.match(pattern, l)]
if len(lines) != 1:
    sys.exit(f"{path}: want exactly one line matching {pattern!r}, got {len(lines)}")
m = re.search(r"CMD\s+(\[.*\])\s*$", lines[0])
if not m:
    sys.exit(f"{path}: {lines[0]!r} is not in exec form (a JSON array)")
for arg in json.loads(m.group(1)):
    print(arg)
PY
}

check() { # example-dir
  local dir=$1 df=$1/Dockerfile
  [[ -f $df ]] || fail "$df is missing"
  # Base images pinned: name:version (a digit in the tag, not latest) or a digest. A base named
  # by a build argument (FROM ${ARG}) is checked by the argument's default.
  grep -E '^FROM ' "$df" | while read -r _ image _; do
    if [[ $image =~ ^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$ ]]; then
      local arg=${BASH_REMATCH[1]}
      image=$(sed -n "s/^ARG $arg=//p" "$df" | head -1)
      [[ -n $image ]] || fail "$df: FROM \${$arg}: the argument $arg has no default"
    fi
    [[ $image =~ @sha256:[0-9a-f]{64}$ || ( $image =~ :[^:]*[0-9][^:]*$ && ! $image =~ :latest ) ]] \
      || fail "$df: base image $image is not pinned to a version"
  done
  local user
  user=$(grep -E '^USER ' "$df" | tail -1 | awk '{print $2}')
  [[ $user =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] || fail "$df: the last USER must be a non-root numeric uid, got '${user:-none}'"
  if grep -vE '^\s*#' "$df" | grep -q 'soniq-sidecar'; then fail "$df: a handler image holds no sidecar binary"; fi
  # Every COPY source (not --from another stage) exists in the build context (the root).
  grep -E '^COPY ' "$df" | while read -r _ rest; do
    [[ $rest == *--from=* ]] && fail "$df: COPY --from: the handler image is built from its context only"
    local args=() a
    for a in $rest; do [[ $a == --* ]] || args+=("$a"); done
    for a in "${args[@]:0:${#args[@]}-1}"; do
      [[ -e $a ]] || fail "$df: COPY source $a does not exist in the repository"
    done
  done

  local cmd=() probe=()
  mapfile -t cmd < <(exec_form "$df" '^CMD ') || fail "$df: CMD"
  mapfile -t probe < <(exec_form "$df" '^HEALTHCHECK ') || fail "$df: HEALTHCHECK"
  local sock="" i
  for i in "${!cmd[@]}"; do
    [[ ${cmd[$i]} == --listen ]] && sock=${cmd[$((i + 1))]:-}
  done
  [[ $sock =~ ^/run/soniq/[A-Za-z0-9._-]+\.sock$ ]] || fail "$df: CMD must serve --listen /run/soniq/<name>.sock, got '${sock}'"
  [[ " ${probe[*]} " == *" $sock "* ]] || fail "$df: HEALTHCHECK must probe $sock"

  # Run the CMD here, on a temporary path instead of $sock.
  local tmp; tmp=$(mktemp -d)
  local local_sock=$tmp/$(basename "$sock")
  local run=("${cmd[@]/#$sock/$local_sock}") chk=("${probe[@]/#$sock/$local_sock}")
  (cd "$dir" && exec "${run[@]}") 2>"$tmp/stderr" &
  local pid=$!
  local ok=""
  for _ in $(seq 200); do
    if [[ -S $local_sock ]] && grep -q 'listening on' "$tmp/stderr"; then ok=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [[ -z $ok ]]; then kill -KILL "$pid" 2>/dev/null || true; cat "$tmp/stderr" >&2; rm -rf "$tmp"; fail "$df: '${run[*]}' did not listen on $local_sock within 20 s"; fi
  local mode; mode=$(stat -c %a "$local_sock")
  if [[ $mode != 660 ]]; then kill -KILL "$pid"; rm -rf "$tmp"; fail "$df: the socket's mode is $mode, want 660"; fi
  if ! (cd "$dir" && "${chk[@]}"); then kill -KILL "$pid"; cat "$tmp/stderr" >&2; rm -rf "$tmp"; fail "$df: the HEALTHCHECK probe failed against the running CMD"; fi
  kill -TERM "$pid"
  local code=0; wait "$pid" || code=$?
  if [[ $code != 0 ]]; then cat "$tmp/stderr" >&2; rm -rf "$tmp"; fail "$df: the CMD exited $code after SIGTERM, want 0"; fi
  if [[ -e $local_sock ]]; then rm -rf "$tmp"; fail "$df: the socket was not removed on exit"; fi
  rm -rf "$tmp"
  echo "docker-steps-examples: $df: pinned base, USER $user, no sidecar, COPY sources present; '${cmd[*]}' listens on a 0660 socket, passes its probe, exits 0 on SIGTERM"
}

# EXAMPLE_DIRS: other build contexts to check instead (e.g. a modified copy, to try a check).
for d in ${EXAMPLE_DIRS:-examples/node examples/python}; do check "$d"; done
