#!/usr/bin/env bash
# Installs what cnperf's tests and benchmarks need from Debian's packages,
# only when missing: the reference tools (iperf3, iperf2, sockperf, ping,
# traceroute)
# PostgreSQL and MariaDB (for the store tests), Chromium (for the dashboard's browser
# tests), and etcd, containerd, runc and iptables (for the Kubernetes
# harness). Needs root for apt-get; without root
# it says what is missing and exits 0, so tests that need a tool skip with
# their own reason.
set -euo pipefail

need=()
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
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
# Headless Chromium and a font for the dashboard's browser tests.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)

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
