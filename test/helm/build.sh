#!/usr/bin/env bash
# Builds helm (v3, from its Go module helm.sh/helm/v3) into a cache
# directory for the chart tests (deploy/helm), and does nothing when it is
# already there. Helm is not in Debian's packages. Usage:
#   build.sh [CACHE_DIR]   (default /var/cache/cnperf-tools)
# Prints the path of the helm binary.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
cache=${1:-/var/cache/cnperf-tools}
# Without root /var/cache is not writable: use the user's cache instead
# (deploy/helm's tests look in both).
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/cnperf-tools
fi
bin=$cache/helm-$HELM_VERSION
# Two test runs at once must not build into the same place together.
exec 9>"$cache/.helm-build.lock"
flock 9

if [ -f "$bin/.complete" ] && [ -x "$bin/helm" ]; then
  echo "$bin/helm"
  exit 0
fi
mkdir -p "$bin"
command -v go >/dev/null || { echo "build.sh: go is not installed" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
GOBIN="$bin" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
[ -x "$bin/helm" ] || { echo "build.sh: helm missing after go install" >&2; exit 1; }
touch "$bin/.complete"
echo "$bin/helm"
