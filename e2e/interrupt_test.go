package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/cnperftest"
)

// startRespond runs `cnperf respond` on a free loopback port until the test
// ends and returns its address.
func startRespond(t *testing.T, bin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "respond", "--listen", addr, "--log-level", "error")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("cnperf respond: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening") {
				ready <- true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatal("cnperf respond did not say it listens within 20s")
	}
	return addr
}

// TestProbeInterruptPrintsSummary: SIGINT ends a running probe with the
// summary of what was measured so far, as iperf3 and ping do, and the exit
// status theirs (iperf3: 1; ping: 0 with replies).
func TestProbeInterruptPrintsSummary(t *testing.T) {
	bin := cnperftest.Binary(t)
	addr := startRespond(t, bin)
	cases := []struct {
		name     string
		args     []string
		code     int
		summary  string // in stdout after the interrupt
		notAfter time.Duration
	}{
		{"tcp 10s", []string{"tcp", "--to", addr, "-t", "10s"}, 1, "sender", 8 * time.Second},
		{"tcp reverse 10s", []string{"tcp", "--to", addr, "-t", "10s", "-R", "-P", "2"}, 1, "receiver", 8 * time.Second},
		{"udp 10s", []string{"udp", "--to", addr, "-t", "10s", "-b", "50M"}, 1, "packets:", 8 * time.Second},
		{"ping 100", []string{"ping", "--to", "127.0.0.1", "-c", "100", "-i", "100ms"}, 0, "received", 8 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, bin, append([]string{"probe"}, c.args...)...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(1500 * time.Millisecond)
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			took := time.Since(start)
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if c.name == "ping 100" && code != 0 && (strings.Contains(stderr.String(), "socket") || strings.Contains(stderr.String(), "permission")) {
				t.Skipf("no ICMP here: %s", stderr.String())
			}
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, c.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), c.summary) {
				t.Errorf("no summary (%q) after SIGINT\nstdout:\n%s\nstderr:\n%s", c.summary, stdout.String(), stderr.String())
			}
			if strings.Contains(stderr.String(), "context canceled") {
				t.Errorf("stderr reports the interrupt as a failure: %s", stderr.String())
			}
			if c.name == "ping 100" && !strings.Contains(stdout.String(), "icmp_seq=1 time=") {
				t.Errorf("ping printed no line per reply before its summary:\n%s", stdout.String())
			}
			if took > c.notAfter {
				t.Errorf("ended %v after the start; the interrupt should end it within a few seconds", took)
			}
		})
	}
}
