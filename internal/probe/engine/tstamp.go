package engine

import (
	"time"

	"golang.org/x/sys/unix"
)

// HoldRxTimestamps keeps the kernel's time-stamping of received packets on
// until release is called, and waits at most wait until it is in effect.
//
// Linux stamps received packets only while some socket asks for it, and it
// turns the stamping on in deferred work (net_enable_timestamp schedules
// it) when the first such socket appears. Packets received before that work
// runs carry no timestamp, so a short probe that opens the first
// time-stamping socket on a busy machine can see none at all. Holding a
// socket for the whole measurement, and checking with a datagram to itself
// on loopback that stamps arrive, removes that race. Best effort: without a
// usable loopback it holds the socket but cannot check.
func HoldRxTimestamps(wait time.Duration) (release func()) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	release = func() { unix.Close(fd) }
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) != nil {
		return release
	}
	if unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}) != nil {
		return release
	}
	self, err := unix.Getsockname(fd)
	if err != nil {
		return release
	}
	tv := unix.NsecToTimeval(int64(5 * time.Millisecond))
	if unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv) != nil {
		return release
	}
	buf, oob := make([]byte, 1), make([]byte, 128)
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		if unix.Sendto(fd, buf, 0, self) != nil {
			return release
		}
		_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
		if err != nil {
			continue // the datagram was lost or late; try again
		}
		if hasTimestamp(oob[:oobn]) {
			return release
		}
		time.Sleep(time.Millisecond)
	}
	return release
}

func hasTimestamp(oob []byte) bool {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS {
			return true
		}
	}
	return false
}
