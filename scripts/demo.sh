#!/usr/bin/env bash
# The main job (`make demo`). With the lab available it runs the baseline
# suite on a 2-node lab; until then it runs cnperf's probes against a
# responder on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/cnperf

port=${CNPERF_DEMO_PORT:-15201}
"$bin" respond --listen "127.0.0.1:$port" --log-level warn &
resp=$!
trap 'kill $resp 2>/dev/null; wait $resp 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
for kind in tcp udp rr; do
  args=(--to "127.0.0.1:$port" --time 2s)
  [ "$kind" = udp ] && args+=(--rate 1G)
  echo "== cnperf probe $kind ${args[*]}"
  "$bin" probe "$kind" "${args[@]}"
done
echo "== cnperf probe ping --to 127.0.0.1 --count 5 --interval 200ms"
"$bin" probe ping --to 127.0.0.1 --count 5 --interval 200ms
