package probetest

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Iperf3Server is a stock `iperf3 -s` on loopback for tests.
type Iperf3Server struct {
	Addr  string // 127.0.0.1:PORT
	ready chan struct{}
}

// StartIperf3Server starts Debian's iperf3 as a server on a free loopback
// port (killed in t.Cleanup), or skips when iperf3 is not installed.
func StartIperf3Server(t testing.TB) *Iperf3Server {
	t.Helper()
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		t.Skip("iperf3 is not installed (scripts/install-test-deps.sh installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "-s", "-B", "127.0.0.1", "-p", strconv.Itoa(port), "--forceflush")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start iperf3 -s: %v", err)
	}
	s := &Iperf3Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), ready: make(chan struct{}, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "Server listening on") {
				select {
				case s.ready <- struct{}{}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s.WaitReady(t)
	return s
}

// WaitReady waits until iperf3 -s says it listens again: it closes and
// reopens its listening socket after every test.
func (s *Iperf3Server) WaitReady(t testing.TB) {
	t.Helper()
	select {
	case <-s.ready:
	case <-time.After(10 * time.Second):
		t.Fatalf("iperf3 -s on %s did not say it listens within 10s", s.Addr)
	}
}
