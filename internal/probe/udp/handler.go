package udp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// Bounds of the protocol's waits beyond the test itself.
const (
	// drainQuiet ends the wait for datagrams still in flight after the
	// sender stopped: the receiver gives up once none came for this long.
	drainQuiet = 100 * time.Millisecond
	// drainMax bounds that wait.
	drainMax = 2 * time.Second
	// helloWait bounds how long a reverse test waits for the client's hello
	// datagram.
	helloWait = 5 * time.Second
	// slack is added to the test's length for every wait that spans it.
	slack = 15 * time.Second
	// stopGrace is how long past the planned end a receiving responder
	// waits for the sender's stop before it ends the test on its own: the
	// stop travels toward the receiver, where a limiter's queue may hold
	// it for minutes.
	stopGrace = 2 * time.Second
	// resultCopies is how often a result datagram is sent.
	resultCopies = 3
)

// Handler is the udp engine's responder side.
type Handler struct {
	// Opts limit the batching features a reverse test's sender may use.
	Opts udpio.Options
	// SharedOnly receives on the responder's shared socket only, never on
	// a socket of the session's own (ownSocket); for tests and
	// comparisons.
	SharedOnly bool
	// ownDatagrams counts the datagrams read from sessions' own sockets.
	ownDatagrams atomic.Int64
	// rxHook, set by tests, sees each datagram before it is accounted and
	// may deliver it zero, one or more times.
	rxHook func(pkt []byte, deliver func([]byte))
}

// NewHandler returns the udp responder side.
func NewHandler() *Handler { return &Handler{} }

// Kind returns "udp".
func (h *Handler) Kind() string { return probe.KindUDP }

// Serve runs one udp session.
func (h *Handler) Serve(ctx context.Context, s *engine.Session) error {
	if err := Validate(s.Spec); err != nil {
		return fmt.Errorf("invalid udp probe: %w", err)
	}
	spec := withDefaults(s.Spec)
	timeout := spec.TimeoutOr(engine.DefaultControlTimeout)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	m, err := s.Ctrl.Expect(wctx, engine.MsgStart)
	cancel()
	if err != nil {
		return fmt.Errorf("wait for start: %w", err)
	}
	var sd startData
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &sd); err != nil {
			return fmt.Errorf("decode start message: %w", err)
		}
	}
	if spec.Reverse {
		return h.serveSend(ctx, s, spec, timeout)
	}
	return h.serveReceive(ctx, s, spec, sd)
}

// serveReceive counts the client's datagrams, reports intervals live and
// the totals at the end, on the control connection and as datagrams to the
// client's data socket. It ends on the sender's stop or, when the stop has
// not come stopGrace after the planned end, on its own.
func (h *Handler) serveReceive(ctx context.Context, s *engine.Session, spec probe.Spec, sd startData) error {
	rx := newReceiver(s.ID, sd, spec, time.Now)
	cpu0 := engine.SampleCPU()
	var client atomic.Pointer[netip.AddrPort] // where the data comes from
	account := func(pkt []byte, from netip.AddrPort, info engine.RxInfo) {
		if p := client.Load(); p == nil || *p != from {
			client.Store(&from)
		}
		rx.add(pkt, info.TOS, info.TOSOK, info.KernelNs, info.Drops, info.DropsOK)
	}
	fn := func(pkt []byte, from netip.AddrPort, info engine.RxInfo) { account(pkt, from, info) }
	if h.rxHook != nil {
		fn = func(pkt []byte, from netip.AddrPort, info engine.RxInfo) {
			h.rxHook(pkt, func(b []byte) { account(b, from, info) })
		}
	}
	s.HandlePackets(fn)
	own := newOwnSocket(ctx, s, fn, rx.ownSocketDrops, &h.ownDatagrams)
	defer own.stop()
	if from, ok := h.ownSocketPeer(sd, s.Remote); ok {
		if err := own.open(from); err != nil {
			s.Log.Debug("udp: receiving on the shared socket", "err", err)
		}
	}
	if err := s.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStart}); err != nil {
		return err
	}
	// Live interval reports.
	tctx, stopTicks := context.WithCancel(ctx)
	ticks := make(chan struct{})
	go func() {
		defer close(ticks)
		t := time.NewTicker(spec.Interval.D())
		defer t.Stop()
		for {
			select {
			case <-tctx.Done():
				return
			case now := <-t.C:
				b, _ := json.Marshal(rx.tick(now))
				if err := s.Ctrl.Send(tctx, engine.Message{Type: msgInterval, Data: b}); err != nil {
					return
				}
			}
		}
	}()
	defer func() { stopTicks(); <-ticks }()

	var notes []string
	sent := int64(math.MaxInt64) // unknown until the stop comes
	wctx, cancel := context.WithTimeout(ctx, spec.Duration.D()+stopGrace)
	m, err := s.Ctrl.Expect(wctx, engine.MsgStop)
	timedOut := wctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)
	cancel()
	switch {
	case err == nil:
		var tx txReport
		if err := json.Unmarshal(m.Data, &tx); err != nil {
			return fmt.Errorf("decode stop message: %w", err)
		}
		sent = tx.Sent
	case ctx.Err() == nil && timedOut:
		notes = append(notes, fmt.Sprintf("the sender's stop had not arrived %v after the planned end: the receiver ended the test on its own "+
			"(what still comes toward it, the stop included, waits in a queue on the way, e.g. a bandwidth limiter's)", stopGrace))
	default:
		return fmt.Errorf("wait for the sender's stop: %w", err)
	}
	end := time.Now()
	if len(notes) == 0 {
		// Not after ending on its own: datagrams still come, at the
		// limiter's rate, for as long as its backlog lasts.
		end = drain(ctx, rx, sent)
	}
	stopTicks()
	<-ticks
	own.stop()
	mode := own.recvMode()
	if mode == "" {
		mode = s.UDPReadMode()
	}
	use := engine.CPUUseBetween(cpu0, engine.SampleCPU())
	rep := rx.report(end, use.Pct, mode)
	rep.CPUUserPct, rep.CPUSystemPct = cpuSplit(use)
	rep.Notes = append(rep.Notes, notes...)
	b, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	// The result goes both ways back: as datagrams (no acknowledgement
	// needed) and on the control connection (bounded: its window may be
	// full of reports the client cannot acknowledge).
	// Only to the control connection's host: the datagrams' source
	// address is unproven (it may be forged), and a result of up to 60 kB
	// sent three times must not be aimed at someone else.
	dgram := false
	if to := client.Load(); to != nil && sameHost(*to, s.Remote) {
		if d := resultDatagram(s.ID, b); d != nil {
			for i := 0; i < resultCopies; i++ {
				if s.WriteTo(d, *to) == nil {
					dgram = true
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	sctx, scancel := context.WithTimeout(ctx, drainMax)
	defer scancel()
	if err := s.Ctrl.Send(sctx, engine.Message{Type: engine.MsgResult, Data: b}); err != nil && !dgram {
		return err
	}
	return nil
}

// drain waits for datagrams still on their way: until all sent arrived, or
// none came for drainQuiet, or drainMax passed. It returns the time of the
// last arrival it saw (or now).
func drain(ctx context.Context, rx *receiver, sent int64) time.Time {
	deadline := time.Now().Add(drainMax)
	last := rx.received()
	lastChange := time.Now()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for last < sent && time.Since(lastChange) < drainQuiet && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return time.Now()
		case <-t.C:
		}
		if n := rx.received(); n != last {
			last, lastChange = n, time.Now()
		}
	}
	if last >= sent {
		return time.Now()
	}
	return lastChange
}

// serveSend sends to the client (reverse mode) from the shared UDP port.
func (h *Handler) serveSend(ctx context.Context, s *engine.Session, spec probe.Spec, timeout time.Duration) error {
	// Data goes only to an address the client proved is its own.
	to, err := awaitReturnAddress(ctx, s, min(timeout, helloWait))
	if err != nil {
		return err
	}
	tos := -1
	if spec.TOS != nil {
		tos = *spec.TOS
	}
	snd, err := udpio.NewSender(s.UDPConn(), to, tos, offloadOptions(h.Opts, spec))
	if err != nil {
		return fmt.Errorf("udp sender to %s: %w", to, err)
	}
	if err := s.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStart}); err != nil {
		return err
	}
	// The client may give up (or vanish) while this side sends.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clientMsg := make(chan error, 1)
	go func() {
		rctx, rcancel := context.WithTimeout(ctx, spec.Duration.D()+slack+drainMax)
		defer rcancel()
		_, err := s.Ctrl.Expect(rctx, engine.MsgStop)
		cancel()
		clientMsg <- err
	}()
	tx, serr := send(sctx, snd, plan(s.ID, spec))
	early := false
	select {
	case err := <-clientMsg:
		// The client stopped first: it went away (an error) or was
		// interrupted (a stop), which wants what was sent so far.
		if err != nil {
			return fmt.Errorf("client ended the test early: %w", err)
		}
		early = true
	default:
	}
	if serr != nil && !(early && errors.Is(serr, context.Canceled)) {
		return serr
	}
	b, err := json.Marshal(tx)
	if err != nil {
		return fmt.Errorf("encode stop message: %w", err)
	}
	if err := s.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStop, Data: b}); err != nil {
		return err
	}
	if early {
		return nil // the client counts what is in flight, then closes
	}
	// Keep the session until the client has counted what is in flight.
	if err := <-clientMsg; err != nil {
		s.Log.Debug("client did not confirm the end of the test", "err", err)
	}
	return nil
}

// ownSocketPeer returns the address the session's own socket is connected
// to: the client's data socket as the start message names it, only if it
// is on the control connection's host (a socket connected to another
// host's address would take that host's datagrams, another test's, off the
// shared socket); false when the shared socket is to receive.
func (h *Handler) ownSocketPeer(sd startData, ctrl net.Addr) (netip.AddrPort, bool) {
	if h.SharedOnly || sd.From == "" {
		return netip.AddrPort{}, false
	}
	from, err := netip.ParseAddrPort(sd.From)
	if err != nil || from.Port() == 0 || !sameHost(from, ctrl) {
		return netip.AddrPort{}, false
	}
	return from, true
}

// sameHost reports whether a datagram's source is on the host of the
// control connection's peer.
func sameHost(from netip.AddrPort, ctrl net.Addr) bool {
	c, err := netip.ParseAddrPort(ctrl.String())
	return err == nil && c.Addr().Unmap() == from.Addr().Unmap()
}
