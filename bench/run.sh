#!/usr/bin/env bash
# `make bench`: the benchmarks, about 15 minutes on a 2-core machine
# (the measuring is bounded to 20). Writes docs/benchmarks.md and docs/benchmarks.png.
#
#   bench/run.sh [DRIVER FLAGS...]   # e.g. bench/run.sh -n 2000 -runs 1 (a quick check)
#   bench/run.sh -sections peers     # the native queues beside the sidecar alone (about 2 minutes)
#   bench/run.sh -sections producers # enqueueing from Node: soniq-client, pg-boss, graphile-worker
#   bench/run.sh -sections limits    # fleet-wide caps against the same jobs unlimited (about 3 minutes)
#   bench/run.sh -sections fleet     # 1 to 128 simulated sidecars on one database (about 2.5 minutes;
#                                    # -fleet-rounds 1 -fleet-sizes 1,8,128 for a quicker one)
#   bench/run.sh -sections priority,sharing   # claim-ahead: a high-priority job behind a full
#                                    # reserve, and the sharing curve with claim_ahead default and 0
#   bench/run.sh -sections throughput -only python-stdio,python-stdio-ahead0   # the reserve's gain
#
# Needs Go, python3 with venv and pip (the Soniq release, the same release
# with its SQLite extra, PgQueuer, Procrastinate and matplotlib are
# installed into cached virtualenvs), node and npm (graphile-worker and
# pg-boss, from their package-lock.json files, into cached directories),
# PostgreSQL 15 for .ci/pg.sh, and pgbouncer for the pooler section
# (.ci/pgbouncer.sh; -sections leaves it out).
# With BENCH_DATABASE_URL set, that server is used instead of a fresh one;
# BENCH_OUT and BENCH_PNG move the report and the chart (for trial runs).
# BENCH_QUICK=1 is a smoke run (about a minute): every section with tiny
# sizes, written to a scratch directory unless BENCH_OUT/BENCH_PNG say
# otherwise; it proves the bench still works and measures nothing worth
# reading (`make test` runs it).
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${XDG_CACHE_HOME:-$HOME/.cache}/soniq-sidecar"
mkdir -p "$cache"

# venv DIR REQUIREMENTS: a virtualenv holding REQUIREMENTS, reused while the
# file is unchanged. The Soniq one is named as integration/ names it, so
# the two share it.
# A lock per directory: two runs sharing the cache (two checkouts) must not
# make, or remove, one directory at the same time. (A virtualenv cannot be
# made elsewhere and renamed: its scripts name their interpreter's path.)
venv() {
  local dir="$1" reqs="$2"
  (
    flock 9
    if [[ -f "$dir/.installed" ]] && cmp -s "$dir/.installed" "$reqs"; then exit 0; fi
    rm -rf "$dir"
    python3 -m venv "$dir" >&2
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs" >&2
    cp "$reqs" "$dir/.installed"
  ) 9>"$dir.lock"
}
hash12() { sha256sum "$1" | cut -c1-12; }

# The peers (section peers): each from its own pinned files under
# bench/peers/KEY, in a cache directory of its own reused while they are
# unchanged: a virtualenv for the Python ones, `npm ci` for the Node ones.
nodedir() {
  local dir="$1" src="$2"
  (
    flock 9
    if [[ -f "$dir/.installed" ]] && cmp -s "$dir/.installed" "$src/package-lock.json"; then exit 0; fi
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$src/package.json" "$src/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
    cp "$src/package-lock.json" "$dir/.installed"
  ) 9>"$dir.lock"
}
# The four install side by side (mostly waiting on the registries), while
# the Soniq virtualenvs are made and the binary builds.
peer_installs=() peer_pids=() peer_keys=()
for key in graphile-worker pg-boss pgqueuer procrastinate; do
  src="bench/peers/$key"
  if [[ -f "$src/package-lock.json" ]]; then
    dir="$cache/peer-$key-$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-12)"
    nodedir "$dir" "$src" &
    peer_installs+=("$key=$dir")
  else
    dir="$cache/peer-$key-venv-$(hash12 "$src/requirements.txt")"
    venv "$dir" "$src/requirements.txt" &
    peer_installs+=("$key=$dir/bin/python")
  fi
  peer_pids+=("$!") peer_keys+=("$key")
done
peer_installs="$(IFS=,; echo "${peer_installs[*]}")"

soniq_reqs=integration/soniq-requirements.txt
soniq_venv="$cache/soniq-venv-$(hash12 "$soniq_reqs")"
chart_reqs=bench/chart-requirements.txt
chart_venv="$cache/bench-chart-venv-$(hash12 "$chart_reqs")"
venv "$soniq_venv" "$soniq_reqs"
venv "$chart_venv" "$chart_reqs"

# The binary under test is built here, with `make build`'s flags, so a
# concurrent `make build` cannot swap it mid-run.
work="$(mktemp -d "${TMPDIR:-/tmp}/soniq-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Soniq's worker on SQLite needs its sqlite extra: the same release plus
# bench/soniq-sqlite-requirements.txt, in a virtualenv of its own (the
# integration tests' one stays as they make it).
sqlite_reqs="$work/soniq-sqlite-requirements.txt"
cat "$soniq_reqs" bench/soniq-sqlite-requirements.txt >"$sqlite_reqs"
soniq_sqlite_venv="$cache/soniq-sqlite-venv-$(hash12 "$sqlite_reqs")"
venv "$soniq_sqlite_venv" "$sqlite_reqs"

make --no-print-directory build BIN="$work/soniq-sidecar" >&2
go build -o "$work/bench" ./bench
for i in "${!peer_pids[@]}"; do
  wait "${peer_pids[$i]}" || { echo "FATAL: installing the peer ${peer_keys[$i]} (bench/peers/${peer_keys[$i]}) failed" >&2; exit 1; }
done

out="${BENCH_OUT:-docs/benchmarks.md}" png="${BENCH_PNG:-docs/benchmarks.png}"
quick=()
if [[ -n "${BENCH_QUICK:-}" ]]; then
  out="${BENCH_OUT:-$work/benchmarks.md}" png="${BENCH_PNG:-$work/benchmarks.png}"
  quick=(-n 400 -warm 100 -soniq-n 100 -runs 1 -latency-seconds 0.5 -latency-runs 1 -shutdown-runs 1 -shutdown-timeout 1s -depths 1000,3000 -sidecars 1,2 -budget 2m
    -sqlite-n 300 -sqlite-soniq-n 300 -sqlite-soniq-budget-n 20 -sqlite-depths 300,1000 -sqlite-drain 300 -sqlite-window 2s
    -prio-runs 1 -prio-jobs 10 -prio-interval 20ms -prio-backlog 1000
    -peers-n 200 -peers-slow-n 200 -peers-runs 1 -peers-latency-seconds 0.5 -peers-strict
    -producers-batch 200 -producers-runs 1 -producers-single 20
    -limits-n 300 -limits-keys 50 -limits-runs 1 -limits-backlog 1000 -limits-rate-jobs 300
    -fleet-sizes 1,4 -fleet-rate 1000 -fleet-warmup 1s -fleet-window 1s -fleet-rounds 1)
fi
args=(-sidecar "$work/soniq-sidecar" -soniq "$soniq_venv/bin/soniq" -soniq-sqlite "$soniq_sqlite_venv/bin/soniq" -python python3 -node node
  -peer-installs "$peer_installs" -out "$out" "${quick[@]}" "$@")
if [[ -n "${BENCH_DATABASE_URL:-}" ]]; then
  "$work/bench" -database-url "$BENCH_DATABASE_URL" "${args[@]}"
else
  .ci/pg.sh run "$work/bench" "${args[@]}"
fi
"$chart_venv/bin/python" bench/chart.py "$out" "$png"
echo "wrote $out and $png" >&2
