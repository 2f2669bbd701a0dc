#!/usr/bin/env bash
# A throwaway PostgreSQL for the store and server tests.
#
#   scripts/pg-test.sh start   initdb + start a private cluster (Debian's
#                              PostgreSQL 15 binaries, run as user postgres
#                              when we are root) in a temp dir, listening only
#                              on a unix socket in that dir; prints its DSN
#   scripts/pg-test.sh stop    stop it and remove the dir
#
# start and stop find each other through a state file named after this
# checkout's directory, so test runs in different checkouts do not collide;
# set CNPERF_PG_STATE to choose the file.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
state=${CNPERF_PG_STATE:-/tmp/cnperf-pg-test.$(printf %s "$repo" | cksum | cut -d' ' -f1).state}

find_bin() {
  local d
  for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

# as_pg runs a command as the cluster's owner.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start() {
  local bin dir port
  if ! bin=$(find_bin); then
    echo "pg-test: no PostgreSQL binaries under /usr/lib/postgresql (apt-get install postgresql)" >&2
    exit 1
  fi
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    echo "pg-test: running as root but there is no postgres user to run the cluster" >&2
    exit 1
  fi
  if [ -f "$state" ]; then
    stop >/dev/null 2>&1 || true
  fi
  dir=$(mktemp -d /tmp/cnperf-pg.XXXXXX)
  chmod 0755 "$dir"
  [ "$(id -u)" = 0 ] && chown postgres: "$dir"
  # Any port number will do: the cluster listens on no TCP address, only
  # on the socket $dir/.s.PGSQL.$port.
  port=5432
  echo "dir=$dir" >"$state"
  echo "bin=$bin" >>"$state"
  if ! as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1; then
    echo "pg-test: initdb failed:" >&2
    tail -n 20 "$dir/initdb.log" >&2
    stop >/dev/null 2>&1 || true
    exit 1
  fi
  if ! as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses='' -k $dir -p $port -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
      start >/dev/null 2>&1; then
    echo "pg-test: PostgreSQL did not start:" >&2
    tail -n 20 "$dir/server.log" >&2
    stop >/dev/null 2>&1 || true
    exit 1
  fi
  echo "postgres://postgres@/postgres?host=$dir&port=$port&sslmode=disable"
}

stop() {
  local dir bin
  if [ ! -f "$state" ]; then
    return 0
  fi
  dir=$(sed -n 's/^dir=//p' "$state")
  bin=$(sed -n 's/^bin=//p' "$state")
  if [ -n "$dir" ] && [ -d "$dir/data" ] && [ -n "$bin" ]; then
    as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  fi
  case "$dir" in
    /tmp/cnperf-pg.*) rm -rf "$dir" ;;
  esac
  rm -f "$state"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
