#!/usr/bin/env bash
# Runs `go test -race` over the given packages with a throwaway PostgreSQL
# and a throwaway MariaDB for the store tests (when scripts/pg-test.sh and
# scripts/mysql-test.sh can start them), and always stops them again.
# Usage: run-tests.sh TIMEOUT PKG...
set -euo pipefail
timeout=$1; shift
cd "$(dirname "$0")/.."

stop_databases() {
  scripts/pg-test.sh stop >/dev/null 2>&1 || true
  scripts/mysql-test.sh stop >/dev/null 2>&1 || true
}
trap stop_databases EXIT
if dsn=$(scripts/pg-test.sh start); then
  export CNPERF_TEST_POSTGRES_DSN="$dsn"
else
  echo "run-tests: could not start PostgreSQL; its store tests will skip" >&2
fi
if dsn=$(scripts/mysql-test.sh start); then
  export CNPERF_TEST_MYSQL_DSN="$dsn"
else
  echo "run-tests: could not start MariaDB; its store tests will skip" >&2
fi
# Make /var/run/netns a shared mount point before any test makes named
# namespaces, as `ip netns add` does on first use: otherwise a test that
# runs `ip netns add` later binds the directory over itself and hides the
# namespaces other tests mounted there, which then cannot be removed.
if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null; then
  ip netns add cnperf-tests-init 2>/dev/null && ip netns del cnperf-tests-init || true
fi
go test -race -count=1 -timeout "$timeout" "$@"
