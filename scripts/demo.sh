#!/usr/bin/env bash
# The main job (`make demo`): build a 2-node lab, run the baseline suite in
# it through the real server and agents, print the table, remove the lab.
# The lab needs CAP_NET_ADMIN, so this runs as root (or through sudo).
# Every row the README promises is printed: the pod-service row needs
# iptables (the lab's Service is kube-proxy's iptables rules), installed
# here from Debian's package when missing; where it cannot be, the demo
# says that it leaves the row out and why.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/cnperf

if [ "$(id -u)" -ne 0 ]; then
  echo "make demo: the lab needs CAP_NET_ADMIN (network namespaces); run it as root: sudo make demo" >&2
  exit 1
fi
have_iptables() { command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || [ -x /sbin/iptables ]; }
if ! have_iptables; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "make demo: installing iptables (Debian package), which the lab's Service (the pod-service row) needs" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iptables >&2; } || true
  fi
  if ! have_iptables; then
    echo "make demo: the pod-service row is left out: the lab's Service needs iptables, which is not installed and could not be (install the iptables package)" >&2
  fi
fi
echo "== cnperf lab run baseline --nodes 2 --pods-per-node 2 --time 2s --repeat 3" >&2
exec "$bin" lab run baseline --name demo --nodes 2 --pods-per-node 2 --time 2s --repeat 3 --log-level warn
