// Package probe is the contract of every cnperf measurement: the Prober
// interface and its Registry, the probe Spec, the typed Result, the kinds,
// and the parsers of DSCP/TOS names and rates; the test keys a server
// grants and a responder checks. It is data and pure functions: it opens
// no socket, so the API, the suites and the report depend on it freely.
//
// The engines live in sub-packages (tcp, udp, rr, icmp, stamp, external),
// each exporting a Prober and, where it needs one, a Handler for the
// responder; what they share at run time (the responder, the client's
// control connection, socket options) is in internal/probe/engine. The
// binary builds the registry of probers explicitly; nothing registers
// itself.
package probe
