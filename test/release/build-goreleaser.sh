#!/usr/bin/env bash
# Builds goreleaser (v2, from its Go module github.com/goreleaser/goreleaser/v2)
# into a cache directory for the snapshot-release test (test/release), and
# does nothing when it is already there. Usage:
#   build-goreleaser.sh [CACHE_DIR]   (default /var/cache/cnperf-tools)
# Prints the path of the goreleaser binary.
set -euo pipefail

# The newest release whose go.mod the project's Go toolchain (1.26) satisfies
# and whose dependencies the module proxy serves (v2.17.0 needs
# go.digitalxero.dev/go-msix, which proxy.golang.org refuses with 403).
GORELEASER_VERSION=${GORELEASER_VERSION:-v2.16.0}
cache=${1:-/var/cache/cnperf-tools}
# Without root /var/cache is not writable: use the user's cache instead.
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/cnperf-tools
fi
bin=$cache/goreleaser-$GORELEASER_VERSION
mkdir -p "$cache"
# Two test runs at once must not build into the same place together.
exec 9>"$cache/.goreleaser-build.lock"
flock 9

if [ -f "$bin/.complete" ] && [ -x "$bin/goreleaser" ]; then
  echo "$bin/goreleaser"
  exit 0
fi
mkdir -p "$bin"
command -v go >/dev/null || { echo "build-goreleaser.sh: go is not installed" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
GOBIN="$bin" go install -trimpath -ldflags "-s -w -X main.version=$GORELEASER_VERSION" \
  "github.com/goreleaser/goreleaser/v2@$GORELEASER_VERSION" >&2
[ -x "$bin/goreleaser" ] || { echo "build-goreleaser.sh: goreleaser missing after go install" >&2; exit 1; }
touch "$bin/.complete"
echo "$bin/goreleaser"
