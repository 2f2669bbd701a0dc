package external

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/nettest"
)

func needTool(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("skipping: %s is not installed (apt-get install -y %s)", tool, map[string]string{
			ToolIperf3: "iperf3", ToolIperf2: "iperf", ToolPing: "iputils-ping", ToolTraceroute: "traceroute"}[tool])
	}
}

// freePort returns a port nothing listens on right now (TCP and UDP).
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", l.Addr().String())
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

func TestRunIperfEndToEnd(t *testing.T) {
	tests := []struct {
		name, tool, param string
		udp               bool
		kind              string
	}{
		{"iperf3 tcp", ToolIperf3, "-t 1", false, "tcp"},
		{"iperf3 udp", ToolIperf3, "-u -b 20M -t 1", false, "udp"},
		{"iperf3 tcp reverse", ToolIperf3, "-t 1 -R", false, "tcp"},
		{"iperf2 tcp", ToolIperf2, "-t 1 -i 0.5", false, "tcp"},
		{"iperf2 udp", ToolIperf2, "-u -b 20M -t 1 --trip-times", true, "udp"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			needTool(t, tc.tool)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srv, err := StartServer(ctx, tc.tool, tc.udp, "127.0.0.1", freePort(t))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			inv, err := Build(tc.tool, tc.param, srv.Addr())
			if err != nil {
				t.Fatal(err)
			}
			out, err := Run(ctx, inv)
			if err != nil {
				t.Fatalf("run: %v\nstdout: %s\nstderr: %s", err, out.Raw, out.Stderr)
			}
			r := out.Result
			if r.Kind != tc.kind || r.Tool != tc.tool || r.Raw == "" {
				t.Fatalf("kind/tool/raw = %q/%q/%d", r.Kind, r.Tool, len(r.Raw))
			}
			if r.ThroughputBps.Sender <= 0 || r.Bytes.Sender <= 0 {
				t.Errorf("sender throughput %v bytes %v, want > 0", r.ThroughputBps.Sender, r.Bytes.Sender)
			}
			if tc.kind == "udp" {
				if r.Packets == nil || r.Packets.Sent == 0 || r.LossPct == nil || *r.LossPct < 0 || *r.LossPct > 100 {
					t.Fatalf("udp packets %+v loss %v", r.Packets, r.LossPct)
				}
				// 20 Mbit/s for ~1 s: the receiver sees no more than that,
				// and about that when the tool gets the CPU (a figure).
				if r.ThroughputBps.Receiver <= 0 || r.ThroughputBps.Receiver > 30e6 {
					t.Errorf("receiver throughput %v, want some and at most the 20e6 sent", r.ThroughputBps.Receiver)
				}
				figure.Check(t, *r.LossPct <= 50 && r.ThroughputBps.Receiver >= 10e6, "udp loss %v %%, receiver throughput %v, want at most 50 %% and about 20e6", *r.LossPct, r.ThroughputBps.Receiver)
			}
			if tc.tool == ToolIperf2 {
				// The server's own report joins the client's output.
				deadline := time.Now().Add(3 * time.Second)
				for !strings.Contains(srv.Output(), " sec ") && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				full, err := ParseIperf2(out.Raw, srv.Output())
				if err != nil {
					t.Fatalf("parse with server output: %v\n%s", err, srv.Output())
				}
				if full.ThroughputBps.Receiver <= 0 {
					t.Errorf("receiver throughput %v with server output, want > 0", full.ThroughputBps.Receiver)
				}
			}
		})
	}
}

func TestRunPingAndTracerouteLoopback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Run("ping", func(t *testing.T) {
		needTool(t, ToolPing)
		inv, err := Build(ToolPing, "-c 3 -i 0.2", "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		out, err := Run(ctx, inv)
		if err != nil {
			t.Fatalf("%v\n%s", err, out.Stderr)
		}
		r := out.Result
		if r.Packets.Sent != 3 || r.Packets.Received != 3 || *r.LossPct != 0 || r.RTTms.Count != 3 || r.RTTms.Max <= 0 {
			t.Fatalf("ping result %+v rtt %+v", r.Packets, r.RTTms)
		}
	})
	t.Run("traceroute", func(t *testing.T) {
		needTool(t, ToolTraceroute)
		inv, err := Build(ToolTraceroute, "-q 2", "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		out, err := Run(ctx, inv)
		if err != nil {
			t.Fatalf("%v\n%s", err, out.Stderr)
		}
		h := out.Result.Hops
		if len(h) != 1 || h[0].Addr != "127.0.0.1" || !h[0].Reached || len(h[0].RTTms) != 2 {
			t.Fatalf("hops %+v", h)
		}
	})
}

func TestRunFailures(t *testing.T) {
	needTool(t, ToolIperf3)
	needTool(t, ToolIperf2)
	ctx := context.Background()
	t.Run("nothing listens", func(t *testing.T) {
		for _, tool := range []string{ToolIperf3, ToolIperf2} {
			inv, err := Build(tool, "-t 1", net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err = Run(ctx, inv)
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), "refused") && !strings.Contains(err.Error(), "exit status") {
				t.Errorf("%s: err = %v, want a refused connection", tool, err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s: failing took %v", tool, d)
			}
		}
	})
	t.Run("cancel kills the group", func(t *testing.T) {
		srv, err := StartServer(ctx, ToolIperf3, false, "127.0.0.1", freePort(t))
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		inv, _ := Build(ToolIperf3, "-t 60", srv.Addr())
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = Run(cctx, inv)
		if err == nil || !strings.Contains(err.Error(), "cancelled") && !strings.Contains(err.Error(), "timed out") {
			t.Errorf("err = %v, want cancelled", err)
		}
		if d := time.Since(start); d > 4*time.Second {
			t.Errorf("cancel took %v", d)
		}
	})
	t.Run("ping no route", func(t *testing.T) {
		needTool(t, ToolPing)
		// In a fresh namespace (only lo, down) nothing is routable: ping
		// fails at once with exit 2, and no packet leaves this host.
		nettest.Require(t)
		ns, err := nettest.NewNS(nettest.Prefix + "p-noroute")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nettest.Delete(ns) })
		inv, _ := Build(ToolPing, "-c 1 -W 1", "198.18.0.77")
		var out Output
		err = ns.Do(func() error {
			var rerr error
			out, rerr = Run(ctx, inv)
			return rerr
		})
		if err == nil || out.ExitCode == 0 {
			t.Errorf("err = %v exit %d, want a failure", err, out.ExitCode)
		}
	})
	t.Run("server port taken", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		_, err = StartServer(ctx, ToolIperf3, false, "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
		if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
			t.Errorf("err = %v, want the server to exit", err)
		}
	})
	t.Run("bad server args", func(t *testing.T) {
		for _, c := range []struct {
			tool, bind string
			port       int
		}{{"ping", "", 0}, {ToolIperf3, "-x", 0}, {ToolIperf3, "", 70000}} {
			if _, err := StartServer(ctx, c.tool, false, c.bind, c.port); err == nil {
				t.Errorf("StartServer(%q, %q, %d) succeeded", c.tool, c.bind, c.port)
			}
		}
	})
}

// TestStartServerPortInUse: a server whose port is taken fails with
// ErrPortInUse, and StartServerOnFreePort finds a free one.
func TestStartServerPortInUse(t *testing.T) {
	needTool(t, ToolIperf3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if srv, err := StartServer(ctx, ToolIperf3, false, "127.0.0.1", ln.Addr().(*net.TCPAddr).Port); !errors.Is(err, ErrPortInUse) {
		if srv != nil {
			srv.Close()
		}
		t.Fatalf("on a taken port: %v, want ErrPortInUse", err)
	}
	srv, err := StartServerOnFreePort(ctx, ToolIperf3, false, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Port() == 0 || srv.Port() == ln.Addr().(*net.TCPAddr).Port {
		t.Errorf("server on port %d, want a free one", srv.Port())
	}
}
