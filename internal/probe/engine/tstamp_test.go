package engine

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHoldRxTimestamps checks that, once HoldRxTimestamps returns, a fresh
// time-stamping socket gets a kernel timestamp on its very first datagram.
func TestHoldRxTimestamps(t *testing.T) {
	release := HoldRxTimestamps(time.Second)
	defer release()

	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Skipf("no loopback to test on: %v", err)
	}
	self, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval(int64(time.Second))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	if err := unix.Sendto(fd, []byte{1}, 0, self); err != nil {
		t.Fatal(err)
	}
	buf, oob := make([]byte, 1), make([]byte, 128)
	_, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, 0)
	if err != nil {
		t.Fatalf("receive own datagram: %v", err)
	}
	if !hasTimestamp(oob[:oobn]) {
		t.Fatal("the first datagram carried no kernel receive timestamp while HoldRxTimestamps held stamping on")
	}
	if hasTimestamp(nil) {
		t.Fatal("hasTimestamp(nil) = true: no control message is no timestamp")
	}
}
