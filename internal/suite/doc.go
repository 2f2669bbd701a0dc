// Package suite is the framework of cnperf's suites: what a suite is
// (Suite, Phase, Step, Endpoint, Options), what it yields (Outcome, Row),
// the Runner that drives a suite through the server's API phase by phase,
// and SLOs evaluated on its rows. Each suite lives in a package of its own
// below this one (baseline, cnicompare, qospriority, shaping, policing,
// capacity); builtin registers them all.
//
// The framework never talks to the kernel or to Kubernetes itself: a suite
// states what must change around a phase, and the environment under the
// run (the lab, a cluster) does it.
package suite
