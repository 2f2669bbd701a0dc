// Package tcp is cnperf's bulk TCP throughput engine, like iperf3 but with
// figures taken where they mean something: the Prober is the client, the
// Handler the responder side.
//
// A test opens one control connection and N data connections (all marked
// with the spec's TOS from the SYN on, and carrying the window and MSS
// options), starts both ends together, and streams for the duration. The
// sender counts what write() accepted; the receiver counts what read()
// returned and times its throughput until the last end of stream. Interval
// reports come from the receiver's byte counts on a fixed schedule from the
// start (default 1 s, at least 100 ms), paired with the sender's
// retransmits from TCP_INFO for the same interval; when the responder
// receives, it sends its samples over the control connection as they
// complete, so Env.OnInterval sees them live. At the deadline the sender
// stops, closes its write side, and the two ends swap final counters on the
// control connection; every wait is bounded, so a test returns within its
// duration plus about ten seconds even if the peer hangs or dies.
//
// CPU figures are the whole process's user+system time over wall time on
// each side (as iperf3 reports them); a responder serving other sessions at
// the same time counts their work too.
//
// dscp_received is the DSCP the receiving kernel recorded on the test's own
// TCP data connections, not on a separate probe packet: the receiver turns
// on IP_RECVTOS / IPV6_RECVTCLASS on its data sockets and reads them back
// with getsockopt IP_PKTOPTIONS / IPV6_2292PKTOPTIONS at the end. For IPv4
// the kernel keeps the TOS of the packet that completed the handshake (the
// sender's mark was set before the SYN, so that packet carries it); for
// IPv6 the traffic class of the latest segment. In reverse mode the
// responder marks its data sockets with the same TOS after accepting them
// (its SYN-ACK is unmarked) and the client reads what arrived.
package tcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// Prober is the client side of the tcp probe.
type Prober struct{}

// Name returns "tcp".
func (Prober) Name() string { return probe.KindTCP }

// Validate rejects specs the engine cannot run.
func (Prober) Validate(spec probe.Spec) error {
	_, err := validate(spec)
	return err
}

// ctrlEvent is what the client's control reader ends with.
type ctrlEvent struct {
	res *sideResult
	err error
}

// Run performs one test against the responder at spec.Target.
func (Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	cfg, err := validate(spec)
	if err != nil {
		return nil, fmt.Errorf("invalid tcp probe: %w", err)
	}
	log := env.Log().With("probe", probe.KindTCP, "dst", spec.Target)
	started := env.Clock()()
	opts := engine.SockOpts{TOS: cfg.tos, WindowBytes: cfg.window, MSS: cfg.mss}
	if !cfg.reverse {
		opts.Congestion = cfg.congestion // this side sends
	}
	cl, err := engine.DialWithKey(ctx, spec, opts, env.TestKey)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	conns := make([]net.Conn, 0, cfg.streams)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := 0; i < cfg.streams; i++ {
		c, err := cl.DialData(ctx, i)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		if err := EnableArrivedTOS(c); err != nil {
			log.Debug("cannot record arriving TOS", "err", err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, setupTimeout)
	err = cl.Ctrl.Send(sctx, engine.Message{Type: engine.MsgStart})
	if err == nil {
		_, err = cl.Ctrl.Expect(sctx, msgGo)
	}
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start tcp test with %s: %w", spec.Target, err)
	}
	t0 := time.Now()
	// The run's own bound does not end with ctx: an interrupted test
	// still stops the responder and fetches its counters (within grace),
	// so the caller gets what was measured so far, as iperf3 on SIGINT.
	rctx, rcancel := context.WithDeadline(context.WithoutCancel(ctx), t0.Add(cfg.duration+3*grace))
	defer rcancel()
	mg := newMerger(env.OnInterval)

	events := make(chan ctrlEvent, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		events <- readControl(rctx, cl.Ctrl, mg)
	}()
	defer func() {
		_ = cl.Close()
		<-readerDone
	}()

	sd := newSide(conns, !cfg.reverse, cfg, t0, mg.add)
	sd.start()
	var early *ctrlEvent
	interrupted := false
	select {
	case <-sd.doneCh:
	case ev := <-events:
		early = &ev
		sd.abort()
	case <-ctx.Done():
		interrupted = true
		sd.abort()
	case <-rctx.Done():
		sd.abort()
	}
	streamErr := sd.wait(rctx)
	if interrupted {
		// The streams were stopped on purpose: not a failure.
		streamErr = nil
	}
	local := sd.finish()
	if early != nil {
		if early.err == nil {
			early.err = errors.New("responder sent its result before the test ended")
		}
		return nil, fmt.Errorf("tcp test to %s: responder failed mid-test: %w", spec.Target, errors.Join(early.err, streamErr))
	}
	stopCtx, stopCancel := context.WithTimeout(rctx, grace)
	defer stopCancel()
	waitCtx := rctx
	if interrupted {
		waitCtx = stopCtx
	}
	stopErr := cl.Ctrl.Send(stopCtx, engine.Message{Type: engine.MsgStop})
	if streamErr != nil {
		return nil, fmt.Errorf("tcp test to %s: %w", spec.Target, streamErr)
	}
	if stopErr != nil {
		return nil, fmt.Errorf("tcp test to %s: %w", spec.Target, stopErr)
	}
	var remote *sideResult
	select {
	case ev := <-events:
		if ev.err != nil {
			return nil, fmt.Errorf("tcp test to %s: final counters: %w", spec.Target, ev.err)
		}
		remote = ev.res
	case <-waitCtx.Done():
		return nil, fmt.Errorf("tcp test to %s: no final counters from the responder: %w", spec.Target, waitCtx.Err())
	}
	if len(remote.Bytes) != cfg.streams {
		return nil, fmt.Errorf("tcp test to %s: responder reported %d streams, want %d", spec.Target, len(remote.Bytes), cfg.streams)
	}

	res := &probe.Result{Kind: probe.KindTCP, Tool: "cnperf", Src: cl.LocalAddr().String(),
		Dst: cl.Ctrl.Conn().RemoteAddr().String(), DSCP: spec.DSCP(), TOS: cfg.tos, StartedAt: started}
	sender, receiver := &local, remote
	if cfg.reverse {
		sender, receiver = remote, &local
	}
	assemble(res, cfg, sender, receiver)
	res.Intervals = mg.flush()
	if interrupted {
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	return res, nil
}

// readControl reads the responder's interval samples until its result.
func readControl(ctx context.Context, ctrl *engine.ControlConn, mg *merger) ctrlEvent {
	for {
		m, err := ctrl.RecvNoDeadline(ctx)
		if err != nil {
			return ctrlEvent{err: err}
		}
		switch m.Type {
		case msgInterval:
			var s sample
			if err := json.Unmarshal(m.Data, &s); err != nil {
				return ctrlEvent{err: fmt.Errorf("decode interval sample: %w", err)}
			}
			mg.add(s)
		case engine.MsgResult:
			var r sideResult
			if err := json.Unmarshal(m.Data, &r); err != nil {
				return ctrlEvent{err: fmt.Errorf("decode result: %w", err)}
			}
			return ctrlEvent{res: &r}
		default:
			return ctrlEvent{err: fmt.Errorf("control protocol: unexpected %q message", m.Type)}
		}
	}
}

// assemble fills the result's figures from both sides.
func assemble(res *probe.Result, cfg config, sender, receiver *sideResult) {
	var sb, rb, retr int64
	var srtt float64
	nSRTT := 0
	for i := 0; i < cfg.streams; i++ {
		st := probe.StreamResult{ID: i}
		st.Bytes.Sender = float64(sender.Bytes[i])
		if i < len(receiver.Bytes) {
			st.Bytes.Receiver = float64(receiver.Bytes[i])
		}
		if sender.ElapsedS > 0 {
			st.ThroughputBps.Sender = st.Bytes.Sender * 8 / sender.ElapsedS
		}
		if receiver.ElapsedS > 0 {
			st.ThroughputBps.Receiver = st.Bytes.Receiver * 8 / receiver.ElapsedS
		}
		if i < len(sender.Retrans) {
			st.Retransmits = probe.Int64(sender.Retrans[i])
			retr += sender.Retrans[i]
		}
		if i < len(sender.SRTTus) && sender.SRTTus[i] > 0 {
			v := float64(sender.SRTTus[i]) / 1000
			st.SRTTms = &v
			srtt += v
			nSRTT++
		}
		sb += sender.Bytes[i]
		rb += int64(st.Bytes.Receiver)
		res.Streams = append(res.Streams, st)
	}
	res.DurationS = sender.ElapsedS
	res.Bytes = &probe.SenderReceiver{Sender: float64(sb), Receiver: float64(rb)}
	res.ThroughputBps = &probe.SenderReceiver{}
	if sender.ElapsedS > 0 {
		res.ThroughputBps.Sender = float64(sb) * 8 / sender.ElapsedS
	}
	if receiver.ElapsedS > 0 {
		res.ThroughputBps.Receiver = float64(rb) * 8 / receiver.ElapsedS
	}
	if sender.Retrans != nil {
		res.Retransmits = probe.Int64(retr)
	}
	if nSRTT > 0 {
		res.SRTTms = probe.Float(srtt / float64(nSRTT))
	}
	res.SetCPU(sender.CPUPct, receiver.CPUPct, sender.cpuUse(), receiver.cpuUse())
	if sender.Congestion != "" || receiver.Congestion != "" {
		res.TCPCongestion = &probe.SenderReceiverNames{Sender: sender.Congestion, Receiver: receiver.Congestion}
	}
	switch {
	case receiver.ArrivedTOS != nil:
		d := *receiver.ArrivedTOS >> 2
		res.DSCPReceived = &d
	case sender.ArrivedTOS != nil:
		d := *sender.ArrivedTOS >> 2
		res.DSCPReceived = &d
		res.Notes = append(res.Notes, "dscp_received is the client's mark as the responder saw it on arrival (an IPv4 socket that connected records no arriving TOS, so the responder's data could not be checked at the client)")
	default:
		res.Notes = append(res.Notes, "dscp_received unavailable: the receiving kernel reported no TOS for the data connections")
	}
	if res.DSCPReceived != nil {
		res.DSCPSurvived = probe.Bool(*res.DSCPReceived == res.DSCP)
	}
	for _, n := range []string{sender.Note, receiver.Note} {
		if n != "" {
			res.Notes = append(res.Notes, n)
		}
	}
}
