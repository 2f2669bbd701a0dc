// Package icmp holds cnperf's ping and traceroute engines: two Probers,
// kind "ping" and kind "trace", that talk to any host's kernel (no cnperf
// responder is needed on the far side).
//
// Sockets. Both engines first try an unprivileged ICMP datagram ("ping")
// socket, which Linux allows when the caller's group lies in
// net.ipv4.ping_group_range (that one sysctl also governs IPv6), and fall
// back to a raw ICMP socket, which needs CAP_NET_RAW. The result's Notes
// say which one was used. With a datagram socket the kernel rewrites the
// echo identifier to the socket's own and delivers only that socket's
// replies; with a raw socket every ICMP message of the host arrives, so
// replies are matched by identifier, sequence number and a random token in
// the payload, and everything else is ignored.
//
// ping. RTTs come from kernel receive timestamps (SO_TIMESTAMPNS) minus the
// time read just before the send system call; when the kernel gives no
// timestamp, the time after the read is used and a Note says so. The rtt_ms
// stdev is the population standard deviation, which is what ping prints as
// "mdev". dscp_received is the DSCP of the echo replies as they arrived
// (IP_RECVTOS / IPV6_RECVTCLASS): Linux copies the request's TOS into its
// echo reply, so with a Linux peer it tells whether the mark survived the
// round trip. Replies that arrive after Timeout count as lost and are noted
// as late; repeated replies are noted as duplicates and not counted twice.
//
// Interval rule: at least 1 ms, with either socket. ping(8)'s 200 ms floor
// for users without CAP_NET_RAW guards a setuid program; cnperf is none,
// and a process admitted to ping sockets may send as fast as it likes
// anyway. Agents under Pod Security restricted (no capabilities) ping at
// the baseline's 10 ms on a ping socket.
//
// trace. Probes go out with increasing TTL (hop limit), Count (default 3)
// per hop, all probes of one hop back to back. Errors come back through the
// socket's error queue (IP_RECVERR / IPV6_RECVERR, read with MSG_ERRQUEUE):
// the kernel hands over the ICMP type, the offender's address
// (SO_EE_OFFENDER) and the original destination, so no raw socket is needed
// for UDP, as with traceroute -U and tracepath. UDP probes (the default) go
// to port 33434 plus the probe's index, which identifies each probe; ICMP
// echo probes are identified by their sequence number. The trace stops at
// the destination (port unreachable, or echo reply), at an ICMP destination
// unreachable from a router (net/host/prohibited), after MaxTTL, or after
// five consecutive hops from which nothing came back; so a trace lasts at
// most (hops sent) × Timeout.
//
// Every blocking operation has a deadline and honours ctx. Run opens every
// socket on the calling goroutine and starts no goroutine, so running it
// inside a network namespace (nettest's NS.Do) keeps all of it there.
package icmp
