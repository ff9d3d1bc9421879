#!/usr/bin/env bash
# A soak run: N no-op jobs (default 50,000) inserted by SQL, drained by the sidecar with the
# Python test handlers over stdio, on Postgres; prints what became of every row.
#
#   SONIQ_TEST_DATABASE_URL=postgres://user@host:port/postgres scripts/soak.sh [N]
#
# The server's user must be allowed to CREATE DATABASE; a throw-away database is created
# and dropped. Not part of `make test` (minutes, not seconds).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
n="${1:-50000}"
admin="${SONIQ_TEST_DATABASE_URL:?set SONIQ_TEST_DATABASE_URL to a Postgres server URL}"
command -v psql >/dev/null || { echo "soak: psql is required" >&2; exit 1; }
db="soniq_soak_$(date +%s)"
work="$(mktemp -d)"
trap 'psql "$admin" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
psql "$admin" -qc "CREATE DATABASE $db"
url="${admin%/*}/$db"; [[ "$admin" == *\?* ]] && url="$url?${admin#*\?}"
make -s -C "$root" build >/dev/null
bin="$root/bin/soniq-sidecar"
SONIQ_DATABASE_URL="$url" "$bin" migrate >/dev/null
psql "$url" -qc "INSERT INTO soniq_jobs (id, job_name, args, status, max_attempts)
  SELECT gen_random_uuid(), 't.noop', '{}'::jsonb, 'queued', 3 FROM generate_series(1, $n)"
cat >"$work/manifest.yaml" <<YAML
version: 1
handlers:
  - name: soak
    command: [python3, -u, $root/integration/testdata/handlers/test_handlers.py]
    processes: 2
    concurrency: 32
    env: {PYTHONPATH: $root/sdk/python}
    jobs:
      - {name: t.noop, cancellable: true}
      - {name: t.record, cancellable: true}
      - {name: t.sleep_async, cancellable: true}
      - {name: t.sleep_sync, cancellable: false}
      - {name: t.stubborn, cancellable: true}
      - {name: t.fail, cancellable: false}
      - {name: t.snooze, cancellable: true}
      - {name: t.trace, cancellable: true}
      - {name: t.crash, cancellable: true}
      - {name: t.await_cancel, cancellable: true}
YAML
start=$(date +%s.%N)
SONIQ_DATABASE_URL="$url" SONIQ_RESULT_TTL=3600 "$bin" run --manifest "$work/manifest.yaml" \
  --metrics-addr "" --log-format json 2>"$work/run.log" &
pid=$!
for _ in $(seq 1 3600); do
  [[ "$(psql "$url" -tAc "SELECT count(*) FROM soniq_jobs WHERE status <> 'done'")" == 0 ]] && break
  kill -0 "$pid" 2>/dev/null || { echo "soak: the sidecar exited early:" >&2; tail -5 "$work/run.log" >&2; exit 1; }
  sleep 1
done
end=$(date +%s.%N)
kill -TERM "$pid"; wait "$pid" || true
psql "$url" -tAc "SELECT 'jobs $n: done ' || count(*) FILTER (WHERE status = 'done')
  || ', run more than once ' || count(*) FILTER (WHERE attempts > 1)
  || ', not done ' || count(*) FILTER (WHERE status <> 'done') FROM soniq_jobs"
psql "$url" -tAc "SELECT 'dead-lettered ' || count(*) FROM soniq_dead_letter_jobs"
echo "ERROR log lines $(grep -c '"level":"ERROR"' "$work/run.log" || true)"
echo "seconds $(awk "BEGIN {printf \"%.1f\", $end - $start}")"
