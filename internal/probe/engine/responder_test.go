package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/probetest"
)

// echoHandler answers "start" with the bytes it read on one data
// connection and counts datagrams of the session.
type echoHandler struct{}

func (echoHandler) Kind() string { return "echo" }

func (echoHandler) Serve(ctx context.Context, s *engine.Session) error {
	got := make(chan int, 16)
	s.HandlePackets(func(pkt []byte, from netip.AddrPort, rx engine.RxInfo) {
		select {
		case got <- len(pkt):
		default:
		}
	})
	if err := s.Ctrl.Send(ctx, engine.Message{Type: engine.MsgReady}); err != nil {
		return err
	}
	dc, err := s.AcceptData(ctx)
	if err != nil {
		return err
	}
	defer dc.Close()
	b, err := io.ReadAll(io.LimitReader(dc, 1<<20))
	if err != nil {
		return err
	}
	if _, err := s.Ctrl.Expect(ctx, engine.MsgStop); err != nil {
		return err
	}
	n := 0
	select {
	case n = <-got:
	case <-time.After(2 * time.Second):
	}
	data, _ := json.Marshal(map[string]int{"bytes": len(b), "stream": dc.Stream, "datagram": n})
	return s.Ctrl.Send(ctx, engine.Message{Type: engine.MsgResult, Data: data})
}

func TestResponderRoutesSessions(t *testing.T) {
	addr := probetest.Start(t, echoHandler{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := engine.Dial(ctx, probe.Spec{Kind: "echo", Target: addr}, engine.SockOpts{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if clock := c.Clock; !clock.SameClock {
		t.Errorf("loopback responder should share the clock: %+v", c.Clock)
	}
	if _, err := c.Ctrl.Expect(ctx, engine.MsgReady); err != nil {
		t.Fatal(err)
	}
	dc, err := c.DialData(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Write([]byte("hello data")); err != nil {
		t.Fatal(err)
	}
	dc.Close()
	uc, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	pkt := make([]byte, 40)
	engine.PacketHeader{Type: engine.PacketUDPData, Session: c.Session}.Put(pkt)
	if _, err := uc.Write(pkt); err != nil {
		t.Fatal(err)
	}
	if err := c.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStop}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Ctrl.Expect(ctx, engine.MsgResult)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]int
	if err := json.Unmarshal(m.Data, &got); err != nil {
		t.Fatal(err)
	}
	if got["bytes"] != len("hello data") || got["stream"] != 7 || got["datagram"] != 40 {
		t.Fatalf("responder saw %v", got)
	}
}

func TestResponderRefusesUnknownKind(t *testing.T) {
	addr := probetest.Start(t, echoHandler{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := engine.Dial(ctx, probe.Spec{Kind: "nope", Target: addr}, engine.SockOpts{})
	var re *engine.RemoteError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), `does not serve probe kind "nope"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestDialRefusedPortFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = engine.Dial(ctx, probe.Spec{Kind: "echo", Target: addr}, engine.SockOpts{})
	if err == nil || !strings.Contains(err.Error(), "connect to responder") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("refused port took %v", time.Since(start))
	}
}

// TestResponderIdleWakesNothing: an idle responder does not wake its
// process. Its UDP reader waited on a 50 ms read deadline to look at its
// context: 20 wake-ups a second, the most of an idle agent's 167 context
// switches a second (make bench-idle). Measured as this process's
// context switches, all threads, in the quietest of three seconds of
// idling (a garbage collection after the set-up can fall in one).
func TestResponderIdleWakesNothing(t *testing.T) {
	probetest.Start(t, echoHandler{})
	time.Sleep(300 * time.Millisecond) // the reader leaves poll(2) after udpIdleAfter
	var least uint64
	for i := range 3 {
		before := contextSwitches(t)
		time.Sleep(time.Second)
		if n := contextSwitches(t) - before; i == 0 || n < least {
			least = n
		}
	}
	if least >= 40 {
		t.Errorf("an idle responder's process switched context %d times in its quietest second, want fewer than 40 (with the 50 ms deadline: over 100)", least)
	} else {
		t.Logf("%d context switches in the quietest second of idling", least)
	}
}

// contextSwitches sums this process's threads' voluntary and involuntary
// context switches.
func contextSwitches(t *testing.T) uint64 {
	t.Helper()
	files, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(files) == 0 {
		t.Skipf("no /proc/self/task: %v", err)
	}
	var n uint64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread that ended
		}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				c, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				n += c
			}
		}
	}
	return n
}

// TestDialUnreachableTellsNoPortState: a closed port, a port whose
// listener never answers, and one whose service speaks another protocol
// fail with an UnreachableError whose Opaque text (what a task's error
// carries) is the same for all (it must not tell the reader which ports
// of a host are open); a cnperf responder's own refusal is still told.
func TestDialUnreachableTellsNoPortState(t *testing.T) {
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	listener := func(serve func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); serve(c) }()
			}
		}()
		return ln.Addr().String()
	}
	silent := listener(func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	other := listener(func(c net.Conn) { _, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n")) })
	closedNow := listener(func(net.Conn) {})
	texts := map[string]string{}
	for _, c := range []struct{ name, addr string }{
		{"closed port", closed()}, {"silent listener", silent}, {"another protocol", other}, {"closes at once", closedNow},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := engine.Dial(ctx, probe.Spec{Kind: "echo", Target: c.addr, Timeout: probe.Duration(500 * time.Millisecond)}, engine.SockOpts{})
		cancel()
		var ue *engine.UnreachableError
		if !errors.Is(err, engine.ErrUnreachable) || !errors.As(err, &ue) {
			t.Errorf("%s: %v, want an UnreachableError", c.name, err)
			continue
		}
		t.Logf("%s: %v", c.name, err)
		texts[c.name] = strings.ReplaceAll(ue.Opaque().Error(), c.addr, "ADDR")
	}
	for name, text := range texts {
		if text != "connect to responder ADDR: responder unreachable" {
			t.Errorf("%s: %q tells more than unreachable", name, text)
		}
	}
	// A cnperf responder that refuses says why.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := engine.Dial(ctx, probe.Spec{Kind: "nope", Target: probetest.Start(t, echoHandler{})}, engine.SockOpts{})
	var re *engine.RemoteError
	if errors.Is(err, engine.ErrUnreachable) || !errors.As(err, &re) {
		t.Errorf("a responder's refusal: %v, want its RemoteError", err)
	}
}
