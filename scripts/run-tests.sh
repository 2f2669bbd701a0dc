#!/usr/bin/env bash
# Runs `go test -race` over the given packages with a throwaway PostgreSQL
# for the store tests (when scripts/pg-test.sh can start one), and always
# stops it again. Usage: run-tests.sh TIMEOUT PKG...
set -euo pipefail
timeout=$1; shift
cd "$(dirname "$0")/.."

if [ -x scripts/pg-test.sh ]; then
  trap 'scripts/pg-test.sh stop >/dev/null 2>&1 || true' EXIT
  if dsn=$(scripts/pg-test.sh start); then
    export CNPERF_TEST_POSTGRES_DSN="$dsn"
  else
    echo "run-tests: could not start PostgreSQL; its store tests will skip" >&2
  fi
fi
go test -race -count=1 -timeout "$timeout" "$@"
