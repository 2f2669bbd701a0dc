// Package stamp speaks STAMP, the Simple Two-way Active Measurement
// Protocol (RFC 8762), with the optional extensions of RFC 8972 that
// cnperf needs: the Session-Sender Identifier and the Extra Padding,
// Timestamp Information, Class of Service and HMAC TLVs. It interoperates
// with other implementations (routers' reflectors, perfSONAR-style hosts,
// stamp-suite) and, in unauthenticated mode, with TWAMP-Light senders
// that pad their packets to STAMP's 44 octets.
//
// Packets. wire.go encodes and decodes the base packets of both directions
// in both modes: unauthenticated (44 octets) and authenticated (112
// octets, HMAC-SHA-256 truncated to 16 octets over the first 96, RFC 8762
// §4.4). Timestamps are NTP 64-bit (Z = 0) when sent; PTP-format ones
// (Z = 1) are read too. The Error Estimate comes from the kernel's NTP
// state (adjtimex): S = 1 only when the kernel says the clock is
// synchronised, and the bound is its estimated (or maximum) error.
//
// Reflector. Answers each test packet to the address and port it came
// from (so it works behind SNAT), with the same size (symmetric), its
// receive time from the kernel (SO_TIMESTAMPNS), its send time read just
// before the send, and the sender's TTL (IP_RECVTTL). Stateful by default:
// its own sequence numbers per session (source address and port, SSID),
// so the sender can split loss by direction; stateless on request. TLVs
// are answered per RFC 8972: U for types it does not know (copied back),
// M on a malformed TLV and nothing processed after it, I on all when the
// HMAC TLV fails; Class of Service reports the DSCP and ECN that arrived
// (DSCP2, erratum 8199) and puts DSCP1 on the reply. With a key it serves
// only authenticated test packets whose HMAC verifies. It is no traffic
// generator: a packet shorter than a base packet (44 or 112 octets) gets
// no answer (a base-size answer would amplify it; TWAMP-Light senders must
// pad to 44), and neither does a reflector's answer (its Receive Timestamp
// is set where a sender's packet has zeros), so two reflectors cannot be
// made to answer each other forever by one spoofed packet.
//
// A cnperf responder hands the reflector the datagrams on its UDP port
// that are neither cnperf's own nor iperf3's (HandleUnclaimed), so every agent reflects on
// its responder port; `cnperf respond --stamp` and agents also listen on
// port 862. Every read and write has a deadline; replies on the
// responder's shared socket are sent without blocking and dropped if its
// buffer is full.
//
// Sender (Prober, kind "stamp"). Sends Count test packets Interval apart
// (or for Duration), each with a CoS TLV (DSCP1 = the probe's DSCP) and a
// Timestamp Information TLV, padded by Extra Padding to Size, and reports
// cnperf's keys: rtt_ms (dwell subtracted, like rr), forward and reverse
// delay_ms with error_bound_ms, loss per direction (from a stateful
// reflector's sequence numbers), jitter, dscp_received forward (from the
// CoS answer) and reverse (IP_RECVTOS on the reply). See figures.go.
package stamp
