#!/usr/bin/env bash
# The main job (`make demo`): build a 2-node lab, run the baseline suite in
# it through the real server and agents, print the table, remove the lab.
# The lab needs CAP_NET_ADMIN, so this runs as root (or through sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/cnperf

if [ "$(id -u)" -ne 0 ]; then
  echo "make demo: the lab needs CAP_NET_ADMIN (network namespaces); run it as root: sudo make demo" >&2
  exit 1
fi
echo "== cnperf lab run baseline --nodes 2 --pods-per-node 2 --time 2s --repeat 3" >&2
exec "$bin" lab run baseline --name demo --nodes 2 --pods-per-node 2 --time 2s --repeat 3 --log-level warn
