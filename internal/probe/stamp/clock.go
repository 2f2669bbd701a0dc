package stamp

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// LocalClock returns the Error Estimate this host's clock deserves and
// the synchronisation source to report, read from the kernel's NTP state
// (adjtimex): synchronised (S = 1, source NTP, bound = the estimated
// error) unless the kernel says the clock is unsynchronised (STA_UNSYNC or
// TIME_ERROR), in which case S = 0, source "local free-running" and the
// bound is the kernel's maximum error (16 s once it has given up).
func LocalClock() (ErrorEstimate, uint8) {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return NewErrorEstimate(false, 16*time.Second), SyncLocal
	}
	synced := state != unix.TIME_ERROR && tx.Status&unix.STA_UNSYNC == 0
	if synced {
		est := time.Duration(tx.Esterror) * time.Microsecond
		if est <= 0 {
			est = time.Duration(tx.Maxerror) * time.Microsecond
		}
		return NewErrorEstimate(true, est), SyncNTP
	}
	return NewErrorEstimate(false, time.Duration(tx.Maxerror)*time.Microsecond), SyncLocal
}

// rxMeta is what the kernel said about a received datagram.
type rxMeta struct {
	tos, ttl     int
	tosOK, ttlOK bool
	kernelNs     int64 // 0 when absent
}

// parseCmsgs reads TOS / traffic class, TTL / hop limit and the kernel's
// receive timestamp from a datagram's control messages.
func parseCmsgs(oob []byte) rxMeta {
	m := udpio.ParseCmsgs(oob)
	return rxMeta{tos: m.TOS, tosOK: m.TOSOK, ttl: m.TTL, ttlOK: m.TTLOK, kernelNs: m.KernelNs}
}

// recvOpts asks a UDP socket for every datagram's TOS, TTL and kernel
// receive timestamp, on both IP levels for a dual-stack socket.
func recvOpts(fd int, v6 bool) error {
	set := func(level, opt int) error { return unix.SetsockoptInt(fd, level, opt, 1) }
	if err := set(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS); err != nil {
		return err
	}
	if v6 {
		if err := set(unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS); err != nil {
			return err
		}
		if err := set(unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT); err != nil {
			return err
		}
	}
	// On a v6 socket these cover v4-mapped traffic; they may fail on a
	// v6-only socket, which has none.
	if err := set(unix.IPPROTO_IP, unix.IP_RECVTOS); err != nil && !v6 {
		return err
	}
	if err := set(unix.IPPROTO_IP, unix.IP_RECVTTL); err != nil && !v6 {
		return err
	}
	return nil
}
