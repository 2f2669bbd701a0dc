// Package probe defines what every cnperf measurement engine shares: the
// Prober interface, the probe Spec and the typed Result, DSCP/TOS and rate
// parsing, socket options, CPU accounting, clock-offset estimation and the
// responder that serves every probe kind on one port.
//
// The engines themselves live in sub-packages (tcp, udp, rr, icmp, external),
// each exporting a Prober and, where it needs one, a Handler for the
// responder. The binary builds the registry of probers explicitly; nothing
// registers itself.
//
// Wire protocol. A responder listens on one TCP and one UDP port with the same
// number. A probe client opens a control connection (TCP) that starts with the
// 4-byte preface "CNPC" and then carries newline-delimited JSON messages
// (Message). The first message is a "hello" naming the kind, a random 8-byte
// session id and the spec; the responder answers "ok" or "error". Extra TCP
// data connections for the session start with "CNPD", the 8-byte session id
// and a 4-byte stream index. UDP datagrams for the session start with the
// 12-byte PacketHeader (magic, type, flags, session id). Sessions are
// isolated: a datagram or data connection naming an unknown session is
// dropped.
package probe
