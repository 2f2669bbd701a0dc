// Package agent is cnperf's test agent: the process that runs on every
// node (one per pod of a DaemonSet, and one with the node's host network)
// and carries out the tasks the control-plane server hands it.
//
// An Agent, once Run:
//   - keeps a probe responder on its pod IP, so other agents can measure
//     toward it (tcp, udp, rr, and stamp: its UDP port also reflects STAMP
//     test packets), and a STAMP reflector on its own port (862 by
//     default) for other STAMP tools;
//   - sends a heartbeat with its identity (from the Downward API
//     environment, see IdentityFromEnv) every second; the reply may name
//     tasks to stop;
//   - long-polls the server for tasks, requests to start an iperf/iperf3
//     server as a task's destination, and cancellations;
//   - runs tasks in a pool of at most MaxParallel at once: cnperf's own
//     probes (v2 "probe" tasks, through a probe.Registry) and the seed's tool
//     tasks (ping, iperf, iperf3, traceroute, through internal/probe/external
//     with each tool's allow-list). Each task is bounded by its timeout and
//     the server's deadline, and stops when the server cancels it;
//   - delivers each result until the server acknowledges it. Every result
//     carries a report ID chosen once, so a retry after a lost answer or a
//     server restart is recognised as a duplicate by the server and never
//     counted twice.
//
// Run returns when its context ends: running tasks are stopped and
// reported cancelled, pending deliveries get a last few seconds, iperf
// servers are killed and the responder is closed. Nothing is left running.
//
// It needs a reachable server and, for tool tasks, the tools on PATH.
package agent
