#!/usr/bin/env bash
# Start or stop a throw-away PgBouncer in transaction mode on loopback, in
# front of a Postgres server (the one .ci/pg.sh started), for tests.
#
#   eval "$(.ci/pgbouncer.sh start DIR POSTGRES_URL)"   # prints `export SONIQ_TEST_PGBOUNCER_URL=...`
#   .ci/pgbouncer.sh stop DIR
#   .ci/pgbouncer.sh restart DIR   # start it again from DIR's configuration, on the
#                                  # same port (after it was killed: a stopped one is
#                                  # stopped first)
#   .ci/pgbouncer.sh run CMD ARGS...   # around CMD, in front of $SONIQ_TEST_DATABASE_URL
#
# Every database of the server is reachable through it (a `*` entry), each
# (database, user) pair with PGBOUNCER_POOL_SIZE server connections (default
# 10). Authentication is trust, as on the test server. PgBouncer refuses to
# run as root, so when we are root it runs as the unprivileged `postgres`
# user, like the test server.
set -euo pipefail

PGBOUNCER="${PGBOUNCER:-$(command -v pgbouncer || echo /usr/sbin/pgbouncer)}"
cmd="${1:-}"
usage() { echo "usage: $0 start DIR POSTGRES_URL | stop DIR | restart DIR | run CMD..." >&2; exit 2; }
[[ -n "$cmd" ]] || usage

RUN_USER=postgres
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u "$RUN_USER" -- "$@"
  else
    "$@"
  fi
}

# launch DIR: run pgbouncer from DIR/pgbouncer.ini and wait until it accepts
# connections; prints the export line.
launch() {
  local dir="$1" port user
  port="$(sed -n 's/^listen_port = //p' "$dir/pgbouncer.ini")"
  user="$(sed -n 's/^admin_users = //p' "$dir/pgbouncer.ini")"
  as_owner "$PGBOUNCER" -d "$dir/pgbouncer.ini" >&2 \
    || { cat "$dir/pgbouncer.log" >&2 2>/dev/null; echo "FATAL: pgbouncer did not start" >&2; exit 1; }
  # Ready when it accepts connections.
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "export SONIQ_TEST_PGBOUNCER_URL='postgres://$user@127.0.0.1:$port/postgres?sslmode=disable'"
      return 0
    fi
    sleep 0.1
  done
  cat "$dir/pgbouncer.log" >&2; echo "FATAL: pgbouncer is not accepting connections on 127.0.0.1:$port" >&2; exit 1
}

# ours DIR PID: whether PID is the pgbouncer started from DIR. A pid file
# outlives a killed pgbouncer, and pids come round again quickly while the
# tests start thousands of processes (pid_max is often 32768): a stale pid
# may now be another process, another test's pgbouncer among them.
ours() {
  local dir="$1" pid="$2"
  [[ "$pid" =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$dir/pgbouncer.ini"
}

# halt DIR: stop the pgbouncer of DIR, if it runs.
halt() {
  local dir="$1" pid
  if [[ -f "$dir/pgbouncer.pid" ]]; then
    pid="$(cat "$dir/pgbouncer.pid")"
    ours "$dir" "$pid" || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do ours "$dir" "$pid" || break; sleep 0.1; done
  fi
}

case "$cmd" in
start)
  dir="${2:-}"; pgurl="${3:-}"
  [[ -n "$dir" && -n "$pgurl" ]] || usage
  [[ -x "$PGBOUNCER" ]] || { echo "FATAL: pgbouncer not found (apt-get install pgbouncer, or set PGBOUNCER)" >&2; exit 1; }
  if [[ "$(id -u)" == 0 ]] && ! id "$RUN_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home "$RUN_USER" >&2
  fi
  # postgres://USER@HOST:PORT/DB?...
  re='^postgres(ql)?://([^@:/]+)(:[^@]*)?@([^:/]+):([0-9]+)/'
  [[ "$pgurl" =~ $re ]] || { echo "FATAL: cannot read user, host and port from $pgurl" >&2; exit 1; }
  user="${BASH_REMATCH[2]}"; host="${BASH_REMATCH[4]}"; pgport="${BASH_REMATCH[5]}"
  # A port below the kernel's ephemeral range (32768 and up by default), where the tests' own
  # client connections take their local ports, and that nothing listens on now: a port drawn
  # from 20000-39999 once collided with a local port in use ("nowhere to listen", .ci/run).
  port="${PGBOUNCER_PORT:-}"
  if [[ -z "$port" ]]; then
    for _ in $(seq 20); do
      port=$(( 20000 + RANDOM % 12000 ))
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
    done
  fi
  mkdir -p "$dir"
  cat >"$dir/pgbouncer.ini" <<CONF
[databases]
* = host=$host port=$pgport

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = $user
pool_mode = transaction
default_pool_size = ${PGBOUNCER_POOL_SIZE:-10}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = ${PGBOUNCER_MAX_CLIENTS:-2000}
max_db_connections = 0
server_lifetime = 3600
server_idle_timeout = 60
# A failed server login (Postgres restarting) is retried after 1 s, not
# the default 15 s during which every client is refused.
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
CONF
  printf '"%s" ""\n' "$user" >"$dir/userlist.txt"
  if [[ "$(id -u)" == 0 ]]; then chown -R "$RUN_USER" "$dir"; fi
  launch "$dir"
  ;;
stop)
  dir="${2:-}"
  [[ -n "$dir" ]] || usage
  halt "$dir"
  rm -rf "$dir"
  ;;
restart)
  dir="${2:-}"
  [[ -n "$dir" && -f "$dir/pgbouncer.ini" ]] || { echo "FATAL: no pgbouncer configuration in ${dir:-?} (start it first)" >&2; exit 1; }
  [[ -x "$PGBOUNCER" ]] || { echo "FATAL: pgbouncer not found (apt-get install pgbouncer, or set PGBOUNCER)" >&2; exit 1; }
  halt "$dir"
  rm -f "$dir/pgbouncer.pid"   # left by a killed one
  launch "$dir" >/dev/null
  ;;
run)
  shift
  [[ -n "${SONIQ_TEST_DATABASE_URL:-}" ]] || { echo "FATAL: SONIQ_TEST_DATABASE_URL is not set (start .ci/pg.sh first)" >&2; exit 1; }
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/soniq-pgb.XXXXXX")"
  chmod 0755 "$tmp"
  trap '"$0" stop "$tmp"' EXIT
  eval "$("$0" start "$tmp" "$SONIQ_TEST_DATABASE_URL")"
  export SONIQ_TEST_PGBOUNCER_URL
  "$@"
  ;;
*) usage ;;
esac
