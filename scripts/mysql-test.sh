#!/usr/bin/env bash
# A throwaway MariaDB for the store and server tests (the MySQL dialect).
#
#   scripts/mysql-test.sh start   mariadb-install-db + start a private server
#                                 (Debian's mariadb-server binaries, run as
#                                 user mysql when we are root) in a temp dir,
#                                 listening only on a unix socket in that
#                                 dir; prints its DSN
#   scripts/mysql-test.sh stop    stop it and remove the dir
#
# start and stop find each other through a state file named after this
# checkout's directory, so test runs in different checkouts do not collide;
# set CNPERF_MYSQL_STATE to choose the file.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
state=${CNPERF_MYSQL_STATE:-/tmp/cnperf-mysql-test.$(printf %s "$repo" | cksum | cut -d' ' -f1).state}

find_server() {
  local f
  for f in /usr/sbin/mariadbd /usr/sbin/mysqld; do
    if [ -x "$f" ]; then
      echo "$f"
      return 0
    fi
  done
  return 1
}

start() {
  local server dir user=() pid i
  if ! server=$(find_server) || ! command -v mariadb-install-db >/dev/null || ! command -v mariadb-admin >/dev/null; then
    echo "mysql-test: no MariaDB server (/usr/sbin/mariadbd, mariadb-install-db, mariadb-admin): apt-get install mariadb-server" >&2
    exit 1
  fi
  if [ "$(id -u)" = 0 ]; then
    if ! id mysql >/dev/null 2>&1; then
      echo "mysql-test: running as root but there is no mysql user to run the server" >&2
      exit 1
    fi
    user=(--user=mysql)
  fi
  if [ -f "$state" ]; then
    stop >/dev/null 2>&1 || true
  fi
  dir=$(mktemp -d /tmp/cnperf-mysql.XXXXXX)
  chmod 0755 "$dir"
  [ "$(id -u)" = 0 ] && chown mysql: "$dir"
  echo "dir=$dir" >"$state"
  # root may log in over the socket without a password (auth "normal",
  # empty password): the socket in $dir is the only way in.
  if ! mariadb-install-db --no-defaults --datadir="$dir/data" "${user[@]}" \
      --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1; then
    echo "mysql-test: mariadb-install-db failed:" >&2
    tail -n 20 "$dir/install.log" >&2
    stop >/dev/null 2>&1 || true
    exit 1
  fi
  # No TCP listener at all; durability traded for speed (a test database).
  "$server" --no-defaults --datadir="$dir/data" "${user[@]}" --skip-networking \
    --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" --log-error="$dir/server.log" \
    --skip-log-bin --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 --sync-binlog=0 \
    --innodb-buffer-pool-size=64M --max-connections=400 >/dev/null 2>&1 &
  pid=$!
  echo "pid=$pid" >>"$state"
  for i in $(seq 1 120); do
    if mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -u root --connect-timeout=2 ping >/dev/null 2>&1; then
      echo "mysql://root@/?socket=$dir/mysqld.sock"
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      break
    fi
    sleep 0.5
  done
  echo "mysql-test: MariaDB did not start:" >&2
  tail -n 20 "$dir/server.log" >&2 || true
  stop >/dev/null 2>&1 || true
  exit 1
}

stop() {
  local dir pid i
  if [ ! -f "$state" ]; then
    return 0
  fi
  dir=$(sed -n 's/^dir=//p' "$state")
  pid=$(sed -n 's/^pid=//p' "$state")
  if [ -n "$dir" ] && [ -S "$dir/mysqld.sock" ]; then
    mariadb-admin --no-defaults --socket="$dir/mysqld.sock" -u root --connect-timeout=2 shutdown >/dev/null 2>&1 || true
  fi
  if [ -n "$pid" ]; then
    for i in $(seq 1 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    kill -9 "$pid" 2>/dev/null || true
  fi
  case "$dir" in
    /tmp/cnperf-mysql.*) rm -rf "$dir" ;;
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
