package stamp

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/figure"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/iperf3wire"
)

// startReflector serves a reflector on 127.0.0.1 at a free port until the
// test ends.
func startReflector(t *testing.T, opts ReflectorOptions) (*Reflector, string) {
	t.Helper()
	r, err := NewReflector(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Listen(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("reflector: %v", err)
		}
	})
	return r, r.Addr().String()
}

func tos(v int) *int { return &v }

func TestSenderAgainstReflector(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 20)
	cases := []struct {
		name    string
		refl    ReflectorOptions
		key     []byte
		size    int
		wantRep int64 // replies expected
	}{
		{"open", ReflectorOptions{}, nil, 0, 40},
		{"open padded", ReflectorOptions{Stateless: true}, nil, 1000, 40},
		{"authenticated", ReflectorOptions{Key: key}, key, 0, 40},
		{"authenticated padded", ReflectorOptions{Key: key}, key, 600, 40},
		{"wrong key", ReflectorOptions{Key: key}, bytes.Repeat([]byte{8}, 20), 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			refl, addr := startReflector(t, c.refl)
			spec := probe.Spec{Kind: probe.KindStamp, Target: addr, Count: 40, Interval: probe.Duration(time.Millisecond),
				Size: c.size, TOS: tos(46 << 2), Timeout: probe.Duration(300 * time.Millisecond)}
			res, err := Prober{}.Run(context.Background(), spec, probe.Env{AuthKey: c.key})
			if err != nil {
				t.Fatal(err)
			}
			if res.Packets.Sent != 40 || res.Packets.Received != c.wantRep {
				t.Fatalf("sent %d, received %d, want 40 and %d; notes %v", res.Packets.Sent, res.Packets.Received, c.wantRep, res.Notes)
			}
			reflected, dropped := refl.Counts()
			if c.wantRep == 0 {
				if dropped != 40 || *res.LossPct != 100 || res.RTTms != nil {
					t.Errorf("wrong key: reflector dropped %d, loss %v, rtt %v", dropped, *res.LossPct, res.RTTms)
				}
				return
			}
			if reflected != 40 {
				t.Errorf("reflector counted %d reflected", reflected)
			}
			// Positive and in milliseconds (a second would be a wrong
			// unit); under 20 ms on loopback is the machine's scheduling.
			if res.RTTms == nil || res.RTTms.P50 <= 0 || res.RTTms.P50 > 1000 {
				t.Fatalf("rtt_ms %+v on loopback", res.RTTms)
			}
			figure.Check(t, res.RTTms.P50 <= 20, "rtt_ms p50 %v on loopback, want at most 20 ms", res.RTTms.P50)
			if res.DSCPReceived == nil || *res.DSCPReceived != 46 || !*res.DSCPSurvived {
				t.Errorf("forward dscp_received %v, want 46; notes %v", res.DSCPReceived, res.Notes)
			}
			if res.Reverse.DSCPReceived == nil || *res.Reverse.DSCPReceived != 46 {
				t.Errorf("reverse dscp_received %v, want 46 (CoS DSCP1)", res.Reverse.DSCPReceived)
			}
			for _, d := range []*probe.Direction{res.Forward, res.Reverse} {
				if d.DelayMs == nil || d.DelayMs.Count != 40 || d.ErrorBoundMs == nil || *d.ErrorBoundMs <= 0 {
					t.Errorf("direction %+v: want 40 delays and a positive error bound", d)
				}
				if d.LossPct == nil || *d.LossPct != 0 {
					t.Errorf("direction loss %v, want 0", d.LossPct)
				}
			}
			// One host, one clock: the one-way delays add up to about the
			// round trip.
			if sum := res.Forward.DelayMs.P50 + res.Reverse.DelayMs.P50; sum > 3*res.RTTms.P50+1 {
				t.Errorf("forward + reverse p50 = %.3f ms, rtt p50 %.3f ms", sum, res.RTTms.P50)
			}
			if !strings.Contains(strings.Join(res.Notes, "; "), "reflector timestamps: in") {
				t.Errorf("no Timestamp Information answer in the notes: %v", res.Notes)
			}
		})
	}
}

// TestThroughResponder: the shared responder port reflects STAMP beside
// cnperf's own datagrams and iperf3's (whose server claims only its own).
func TestThroughResponder(t *testing.T) {
	refl, _ := NewReflector(ReflectorOptions{})
	resp := engine.NewResponder(nil, iperf3wire.NewServer())
	resp.HandleUnclaimed(refl.Unclaimed())
	if err := resp.Listen(context.Background(), "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- resp.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	spec := probe.Spec{Kind: probe.KindStamp, Target: resp.Addr().String(), Count: 30, Interval: probe.Duration(time.Millisecond), TOS: tos(34 << 2)}
	res, err := Prober{}.Run(context.Background(), spec, probe.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Packets.Received != 30 || res.DSCPReceived == nil || *res.DSCPReceived != 34 || res.Reverse.DSCPReceived == nil || *res.Reverse.DSCPReceived != 34 {
		t.Fatalf("received %d, dscp forward %v reverse %v; notes %v", res.Packets.Received, res.DSCPReceived, res.Reverse.DSCPReceived, res.Notes)
	}
}

// TestLossPerDirection feeds the figures a stateful reflector's sequence
// numbers with losses on each way.
func TestLossPerDirection(t *testing.T) {
	cases := []struct {
		name         string
		arrivedAtRef []bool // per test packet: reached the reflector
		replyLost    []bool // per test packet: its reply was lost
		stateless    bool
		fwd, rev     int64 // -1: unknown
	}{
		{"forward only", []bool{true, false, true, false, true}, []bool{false, false, false, false, false}, false, 2, 0},
		{"reverse only", []bool{true, true, true, true, true}, []bool{false, true, false, true, false}, false, -1, -1},
		{"both", []bool{true, false, true, true, true, true}, []bool{false, false, true, false, false, false}, false, 1, 1},
		{"stateless", []bool{true, false, true}, []bool{false, false, false}, true, -1, -1},
		{"none", []bool{true, true}, []bool{false, false}, false, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := &run{}
			refSeq := uint32(0)
			for i, arrived := range c.arrivedAtRef {
				p := sent{t1: int64(i) * 1e6}
				if arrived {
					seq := refSeq
					refSeq++
					if c.stateless {
						seq = uint32(i)
					}
					if !c.replyLost[i] {
						p.got = true
						p.reply = reply{t2: p.t1 + 1e5, t3: p.t1 + 2e5, t4: p.t1 + 3e5, reflSeq: seq, kernelRx: true}
					}
				}
				st.pkts = append(st.pkts, p)
			}
			res := st.result(probe.Spec{}, config{}, NewErrorEstimate(false, time.Millisecond), false)
			check := func(what string, d *probe.Direction, want int64) {
				if want < 0 {
					if d.Lost != nil {
						t.Errorf("%s lost = %d, want unknown", what, *d.Lost)
					}
					return
				}
				if d.Lost == nil || *d.Lost != want {
					t.Errorf("%s lost = %v, want %d; notes %v", what, d.Lost, want, res.Notes)
				}
			}
			check("forward", res.Forward, c.fwd)
			check("reverse", res.Reverse, c.rev)
			if got := res.RTTms.P50; got < 0.199 || got > 0.201 {
				t.Errorf("rtt p50 %.4f ms, want 0.2 (0.3 less the 0.1 dwell)", got)
			}
		})
	}
}

func TestSenderFailures(t *testing.T) {
	closed := func() string {
		r, addr := startReflector(t, ReflectorOptions{})
		r.Close()
		return addr
	}()
	cases := []struct {
		name   string
		spec   probe.Spec
		key    []byte
		within time.Duration
		want   string
	}{
		{"nothing listening", probe.Spec{Target: closed, Count: 5}, nil, 5 * time.Second, "refused"},
		{"rate", probe.Spec{Target: closed, RateBps: new(uint64)}, nil, time.Second, "rate"},
		{"size between", probe.Spec{Target: closed, Size: MinSize(false) + 2}, nil, time.Second, "Extra Padding"},
		{"auth size", probe.Spec{Target: closed, Size: MinSize(false)}, bytes.Repeat([]byte{1}, 16), time.Second, "authenticated"},
		{"short key", probe.Spec{Target: closed}, []byte("short"), time.Second, "key of 5 bytes"},
		{"no target", probe.Spec{}, nil, time.Second, "target"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec
			spec.Kind = probe.KindStamp
			t0 := time.Now()
			_, err := Prober{}.Run(context.Background(), spec, probe.Env{AuthKey: c.key})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v, want an error about %q", err, c.want)
			}
			if d := time.Since(t0); d > c.within {
				t.Errorf("took %v, want under %v", d, c.within)
			}
		})
	}
}

func TestTarget(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.1": "192.0.2.1:862", "192.0.2.1:5000": "192.0.2.1:5000", "fd00::1": "[fd00::1]:862",
		"[fd00::1]:9": "[fd00::1]:9", "host": "host:862",
	} {
		if got := Target(in); got != want {
			t.Errorf("Target(%q) = %q, want %q", in, got, want)
		}
	}
}
