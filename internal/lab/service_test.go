package lab

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/rr"
	"github.com/cnperf/cnperf/internal/probe/tcp"
	"github.com/cnperf/cnperf/internal/probe/udp"
)

// TestService: on both backends, a Service in front of n1-p1 carries
// cnperf's probes from n2-p1 through the ClusterIP: TCP, UDP both ways
// (reverse: the client's hello reaches the pod through the DNAT and the
// pod's datagrams, sent from its own IP, come back un-NATed by conntrack
// in the client's node), and UDP request/response. The rules are in every
// node namespace, never in the host's, and gone after RemoveService.
func TestService(t *testing.T) {
	bin, err := iptablesPath()
	if err != nil {
		t.Skip(err)
	}
	for _, backend := range []string{BackendHostGW, BackendVXLAN} {
		t.Run(backend, func(t *testing.T) {
			l := upLab(t, Config{Nodes: 2, PodsPerNode: 1, Backend: backend})
			dst, _ := l.Pod("n1-p1")
			src, _ := l.Pod("n2-p1")
			r := engine.NewResponder(nil, tcp.Handler{}, udp.NewHandler(), rr.Handler{})
			if err := Do(dst.NS, func() error {
				return r.Listen(context.Background(), net.JoinHostPort(dst.IP.Addr().String(), "0"))
			}); err != nil {
				t.Fatal(err)
			}
			sctx, stop := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- r.Serve(sctx) }()
			defer func() {
				stop()
				if err := <-served; err != nil {
					t.Errorf("responder: %v", err)
				}
			}()
			port := r.Addr().(*net.TCPAddr).Port

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			svc, err := l.AddService(ctx, dst.Name, port)
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("10.96.1.%d:%d", dst.IP.Addr().As4()[3], port); svc.Addr() != want {
				t.Errorf("service at %s, want %s", svc.Addr(), want)
			}
			// Adding it again (a run killed before its undo) adds nothing.
			if _, err := l.AddService(ctx, dst.Name, port); err != nil {
				t.Fatal(err)
			}
			for _, n := range l.Nodes {
				if got := strings.Count(natRules(t, bin, n.NS), serviceComment); got != 4 {
					t.Errorf("%s: %d service rules, want 4 (PREROUTING and OUTPUT, tcp and udp)", n.Name, got)
				}
			}
			if strings.Contains(natRules(t, bin, ""), svc.ClusterIP.String()) {
				t.Errorf("the host's own nat table holds the lab's ClusterIP %s", svc.ClusterIP)
			}

			d := probe.Duration(time.Second)
			rate := uint64(50e6)
			for _, c := range []struct {
				name   string
				prober probe.Prober
				spec   probe.Spec
			}{
				{"tcp", tcp.Prober{}, probe.Spec{Kind: probe.KindTCP, Duration: d}},
				{"udp", udp.New(), probe.Spec{Kind: probe.KindUDP, Duration: d, RateBps: &rate}},
				{"udp reverse", udp.New(), probe.Spec{Kind: probe.KindUDP, Duration: d, RateBps: &rate, Reverse: true}},
				{"rr", rr.Prober{}, probe.Spec{Kind: probe.KindRR, Proto: "udp", Duration: d}},
			} {
				spec := c.spec
				spec.Target = svc.Addr()
				var res *probe.Result
				err := Do(src.NS, func() (err error) {
					res, err = c.prober.Run(ctx, spec, probe.Env{})
					return err
				})
				if err != nil {
					t.Errorf("%s through %s: %v", c.name, svc.Addr(), err)
					continue
				}
				m := probe.Metrics(res)
				t.Logf("%s via %s: %s", c.name, svc.Addr(), probe.FormatSummary(res))
				switch c.spec.Kind {
				case probe.KindRR:
					if m["transactions_per_s"] <= 0 || m["rtt_ms.p50"] <= 0 {
						t.Errorf("%s: transactions %v/s, rtt p50 %v ms", c.name, m["transactions_per_s"], m["rtt_ms.p50"])
					}
				case probe.KindUDP:
					if m["throughput_bps.receiver"] <= 0 || m["loss_pct"] < 0 || m["loss_pct"] > 100 {
						t.Errorf("%s: receiver %v bit/s, loss %v %%", c.name, m["throughput_bps.receiver"], m["loss_pct"])
					}
					// 50 Mbit/s through the DNAT loses nothing on a quiet
					// machine; beside a CPU hog the receiver's socket can
					// overflow.
					figure.Check(t, m["loss_pct"] <= 5, "%s lost %v %% at 50 Mbit/s, want at most 5 %%", c.name, m["loss_pct"])
				default:
					if m["throughput_bps.receiver"] <= 0 {
						t.Errorf("%s: receiver %v bit/s", c.name, m["throughput_bps.receiver"])
					}
				}
			}

			if err := l.RemoveService(ctx, svc); err != nil {
				t.Fatal(err)
			}
			for _, n := range l.Nodes {
				if rules := natRules(t, bin, n.NS); strings.Contains(rules, serviceComment) {
					t.Errorf("%s: service rules left after RemoveService:\n%s", n.Name, rules)
				}
			}
		})
	}
}

// natRules lists the nat table of a lab namespace, or of this process's
// own namespace for "" (read only).
func natRules(t *testing.T, bin, ns string) string {
	t.Helper()
	var out, stderr bytes.Buffer
	c := exec.Command(bin, "-w", "5", "-t", "nat", "-S")
	c.Stdout, c.Stderr = &out, &stderr
	start := c.Start
	if ns != "" {
		start = func() error { return Do(ns, c.Start) }
	}
	if err := start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("iptables -t nat -S in %q: %v: %s", ns, err, stderr.String())
	}
	return out.String()
}
