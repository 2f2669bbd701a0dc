#!/usr/bin/env bash
# Installs what cnperf's tests and benchmarks need from Debian's packages,
# only when missing: the reference tools (iperf3, iperf2, sockperf, ping,
# traceroute)
# PostgreSQL and MariaDB (for the store tests), Chromium (for the dashboard's browser
# tests), and etcd, containerd, runc and iptables (for the Kubernetes
# harness), and builds stamp-suite with cargo (cached). Needs root for apt-get; without root
# it says what is missing and exits 0, so tests that need a tool skip with
# their own reason.
#
# Usage: install-test-deps.sh [cilium]. With "cilium" (make test-k8s-cilium)
# it also installs clang-19 and llvm-19 (llc-19): Cilium's agent compiles
# its BPF programs when it starts. make test does not need them, so a fresh
# machine running make test does not fetch a compiler it never uses.
set -euo pipefail

need=()
if [ "${1:-}" = cilium ]; then
  command -v clang-19 >/dev/null 2>&1 || need+=(clang-19)
  command -v llc-19 >/dev/null 2>&1 || need+=(llvm-19)
fi
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
command -v iperf >/dev/null 2>&1 || need+=(iperf)
# sockperf ping-pong: make bench-probes compares rr with it.
command -v sockperf >/dev/null 2>&1 || need+=(sockperf)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
command -v traceroute >/dev/null 2>&1 || need+=(traceroute)
command -v taskset >/dev/null 2>&1 || need+=(util-linux)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
[ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
# The Kubernetes harness (internal/k8stest): etcd, containerd and runc run
# a real two-node cluster; kube-proxy and the CNI portmap plugin need
# iptables; nsenter starts components in the nodes' namespaces.
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v conntrack >/dev/null 2>&1 || need+=(conntrack)
# Calico's Felix (the harness's calico CNI) programs its ipsets with ipset.
command -v ipset >/dev/null 2>&1 || need+=(ipset)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
# Headless Chromium and a font for the dashboard's browser tests.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)

# stamp-suite 1.0.0 (Rust, crates.io), the independent STAMP implementation
# the stamp interop tests (internal/probe/stamp, e2e) run against. Built
# once with cargo (a few minutes on a busy 2-core machine) into a cache
# outside the tree and reused by every later run; without cargo, or when
# the build fails, the interop tests skip and say why.
STAMP_SUITE_VERSION=1.0.0
STAMP_SUITE_ROOT=${CNPERF_STAMP_SUITE_ROOT:-/var/cache/cnperf-stamp/stamp-suite-$STAMP_SUITE_VERSION}
install_stamp_suite() {
  local bin="$STAMP_SUITE_ROOT/bin/stamp-suite" cargo
  [ -x "$bin" ] && return 0
  cargo=$(command -v cargo || true)
  [ -z "$cargo" ] && [ -x /root/.cargo/bin/cargo ] && cargo=/root/.cargo/bin/cargo
  if [ -z "$cargo" ]; then
    echo "install-test-deps: no cargo: stamp-suite not installed (the STAMP interop tests will skip)" >&2
    return 0
  fi
  mkdir -p "$(dirname "$STAMP_SUITE_ROOT")" || return 0
  (
    flock 9
    [ -x "$bin" ] && exit 0
    tmp=$(mktemp -d "$STAMP_SUITE_ROOT.build.XXXXXX")
    echo "install-test-deps: building stamp-suite $STAMP_SUITE_VERSION with cargo (once; cached in $STAMP_SUITE_ROOT)" >&2
    if CARGO_TARGET_DIR="$tmp/target" "$cargo" install --locked --quiet stamp-suite --version "$STAMP_SUITE_VERSION" --root "$tmp/root" >&2; then
      rm -rf "$STAMP_SUITE_ROOT" && mv "$tmp/root" "$STAMP_SUITE_ROOT"
    else
      echo "install-test-deps: building stamp-suite failed (the STAMP interop tests will skip)" >&2
    fi
    rm -rf "$tmp"
  ) 9>"$STAMP_SUITE_ROOT.lock"
}
install_stamp_suite || echo "install-test-deps: stamp-suite set-up failed (the STAMP interop tests will skip)" >&2

# promtool (Prometheus 2.42, Debian's prometheus package) checks and unit-
# tests deploy/prometheus's alert rules. Only the promtool binary is taken
# from the package (apt-get download + dpkg-deb -x into a cache), so no
# Prometheus server is installed or started on this machine.
PROMTOOL_DIR=${CNPERF_PROMTOOL_DIR:-/var/cache/cnperf-tools/promtool}
install_promtool() {
  [ -x "$PROMTOOL_DIR/promtool" ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "install-test-deps: promtool missing; run as root to fetch it (the alert-rule tests will skip)" >&2
    return 0
  fi
  mkdir -p "$PROMTOOL_DIR"
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }) &&
    dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" &&
    install -m 0755 "$tmp/x/usr/bin/promtool" "$PROMTOOL_DIR/promtool" ||
    echo "install-test-deps: fetching promtool failed (the alert-rule tests will skip)" >&2
  rm -rf "$tmp"
}
install_promtool

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-test-deps: missing ${need[*]}; run as root to install them (tests that need them will skip)" >&2
  exit 0
fi
echo "install-test-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
