#!/usr/bin/env bash
# The zero-setup quickstart: in a fresh directory, with no database server and
# no environment, enqueue a handful of example jobs into the default
# sqlite:soniq.db, run the sidecar with an example manifest until they are all
# finished, and print the queue status. The Node demo enqueues from Node, through the
# soniq-client package (examples/node/producer/enqueue.js), as a Node application would; the
# Python demo with soniq-sidecar enqueue.
#
#   scripts/demo.sh examples/python/manifest.yaml
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/bin/soniq-sidecar"
manifest="$root/$1"
[[ -x "$bin" ]] || { echo "build first: make build" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/soniq-demo.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
unset SONIQ_DATABASE_URL

echo "\$ soniq-sidecar migrate"
"$bin" migrate
# enqueue NAME [ARGS_JSON] [MAX_ATTEMPTS]
if [[ "$1" == examples/node/* ]]; then
  echo "\$ node examples/node/producer/enqueue.js ...   (8 example jobs, through soniq-client)"
  enqueue() { node "$root/examples/node/producer/enqueue.js" "$1" "${2:-{\}}" ${3:+--max-attempts "$3"} >/dev/null; }
else
  echo "\$ soniq-sidecar enqueue ...   (8 example jobs)"
  enqueue() { "$bin" enqueue "$1" --args "${2:-{\}}" ${3:+--max-attempts "$3"} >/dev/null; }
fi
enqueue examples.add '{"a": 1, "b": 2}'
enqueue examples.add '{"a": 40, "b": 2}'
enqueue examples.sleep_async '{"seconds": 0.5}'
enqueue examples.sleep_sync '{"seconds": 0.5}'
enqueue examples.print
enqueue examples.fail '{}' 2
enqueue examples.permanent
enqueue examples.add '{"a": "x", "b": 2}'
echo "\$ soniq-sidecar run --manifest $1   (until every job is finished)"
SONIQ_POLL_INTERVAL=0.2 "$bin" run --manifest "$manifest" --metrics-addr "" --log-format text 2>run.log &
pid=$!
for _ in $(seq 1 300); do
  left="$("$bin" status --json 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["queued"]+s["processing"])')"
  [[ "$left" == 0 ]] && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid" || { echo "sidecar exited with $?; its log:" >&2; cat run.log >&2; exit 1; }
grep -c 'msg="handler process ready"' run.log | sed 's/^/handler processes started: /'
echo "\$ soniq-sidecar status"
"$bin" status
echo "\$ soniq-sidecar dead-letter list"
"$bin" dead-letter list
[[ "$left" == 0 ]] || { echo "jobs left unfinished; sidecar log:" >&2; cat run.log >&2; exit 1; }
