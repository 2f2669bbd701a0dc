// Package engine is what the probe engines share at run time: the
// responder that serves every probe kind on one port, the client's Dial
// and control connection, socket options, UDP peer sockets, kernel receive
// timestamps, clock-offset estimation and CPU accounting. The contract
// the engines implement (Spec, Result, Prober) is internal/probe.
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
package engine
