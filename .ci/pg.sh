#!/usr/bin/env bash
# Start or stop a throw-away PostgreSQL 15 on loopback for tests.
#
#   eval "$(.ci/pg.sh start DIR)"   # prints `export SONIQ_TEST_DATABASE_URL=...` on stdout
#   .ci/pg.sh stop DIR
#   .ci/pg.sh restart DIR [fast|immediate] [DOWN_SECONDS]
#                                   # stop the server (every connection is cut;
#                                   # immediate = a crash, recovery at start),
#                                   # keep it down DOWN_SECONDS (default 0), start it
#                                   # again on the same port with the same data
#   .ci/pg.sh run CMD ARGS...       # run CMD with a fresh server, then remove it
#
# PG_MAX_CONNECTIONS sets max_connections (default 300). PG_SYNCHRONOUS_COMMIT
# (default off: fast, but an immediate stop loses the last commits) set to on
# keeps every acknowledged commit through `restart DIR immediate` (fsync stays
# off: the machine itself does not crash).
#
# Postgres refuses to run as root, so when we are root the cluster is owned by
# and started as the unprivileged `postgres` user (created if missing).
set -euo pipefail

PG_BIN="${PG_BIN:-/usr/lib/postgresql/15/bin}"
cmd="${1:-}"; dir="${2:-}"
usage() { echo "usage: $0 start|stop DIR | restart DIR [fast|immediate] [DOWN_SECONDS] | run CMD..." >&2; exit 2; }
[[ -n "$cmd" && -n "$dir" ]] || usage

as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u "$PG_USER" -- "$@"
  else
    "$@"
  fi
}

PG_USER=postgres
if [[ "$(id -u)" == 0 ]] && ! id "$PG_USER" >/dev/null 2>&1; then
  useradd --system --no-create-home "$PG_USER" >&2
fi

case "$cmd" in
start)
  for b in initdb pg_ctl postgres; do
    [[ -x "$PG_BIN/$b" ]] || { echo "FATAL: $PG_BIN/$b not found; PostgreSQL 15 is required for the tests (set PG_BIN)" >&2; exit 1; }
  done
  mkdir -p "$dir"
  if [[ "$(id -u)" == 0 ]]; then chown "$PG_USER" "$dir"; fi
  # Below the kernel's ephemeral range (32768 and up by default), where client connections take
  # their local ports, and not listened on now.
  port="${PGPORT_TEST:-}"
  if [[ -z "$port" ]]; then
    for _ in $(seq 20); do
      port=$(( 20000 + RANDOM % 12000 ))
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
    done
  fi
  as_owner "$PG_BIN/initdb" -D "$dir/data" -U soniq --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; echo "FATAL: initdb failed" >&2; exit 1; }
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = ''
max_connections = ${PG_MAX_CONNECTIONS:-300}
fsync = off
synchronous_commit = ${PG_SYNCHRONOUS_COMMIT:-off}
full_page_writes = off
CONF
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >&2 \
    || { cat "$dir/postgres.log" >&2; echo "FATAL: postgres did not start" >&2; exit 1; }
  echo "export SONIQ_TEST_DATABASE_URL='postgres://soniq@127.0.0.1:$port/postgres?sslmode=disable'"
  ;;
stop)
  if [[ -d "$dir/data" ]]; then
    as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate stop >&2 || true
  fi
  rm -rf "$dir"
  ;;
restart)
  mode="${3:-fast}"; down="${4:-0}"
  [[ "$mode" == fast || "$mode" == immediate ]] || usage
  [[ "$down" =~ ^[0-9]+(\.[0-9]+)?$ ]] || usage
  [[ -d "$dir/data" ]] || { echo "FATAL: no server in $dir (start it first)" >&2; exit 1; }
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop >&2 \
    || { echo "FATAL: postgres did not stop" >&2; exit 1; }
  sleep "$down"
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >&2 \
    || { tail -n 30 "$dir/postgres.log" >&2; echo "FATAL: postgres did not start again" >&2; exit 1; }
  ;;
run)
  shift
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/soniq-pg.XXXXXX")"
  chmod 0755 "$tmp"
  trap '"$0" stop "$tmp"' EXIT
  eval "$("$0" start "$tmp")"
  export SONIQ_TEST_DATABASE_URL
  "$@"
  ;;
*) usage ;;
esac
