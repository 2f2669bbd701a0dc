package udp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udpio"
	"github.com/cnperf/cnperf/internal/stats"
)

// Prober is the udp engine's client side.
type Prober struct {
	// Opts limit the batching features this side may use (tests force the
	// fallbacks with them).
	Opts udpio.Options
	// nameFrom, set by tests, replaces the data socket's address the
	// start message names ("" names none, as a cnperf before the
	// responder's session sockets).
	nameFrom func(netip.AddrPort) string
}

// New returns the udp prober.
func New() *Prober { return &Prober{} }

// Name returns "udp".
func (p *Prober) Name() string { return probe.KindUDP }

// Validate rejects parameters the engine cannot honour.
func (p *Prober) Validate(spec probe.Spec) error { return Validate(spec) }

// sendTimeout bounds one blocking send of the forward test's sender.
const sendTimeout = 5 * time.Second

// clockSamples is how many time exchanges estimate the responder's clock.
const clockSamples = 8

// Run measures one udp test against the responder at spec.Target.
func (p *Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	if err := Validate(spec); err != nil {
		return nil, fmt.Errorf("invalid udp probe: %w", err)
	}
	spec = withDefaults(spec)
	log := env.Log().With("probe", probe.KindUDP, "dst", spec.Target)
	ctx, cancel := context.WithTimeout(ctx, spec.Duration.D()+2*spec.TimeoutOr(engine.DefaultControlTimeout)+slack)
	defer cancel()

	cli, err := engine.DialWithKey(ctx, spec, engine.SockOpts{TOS: spec.TOSByte()}, env.TestKey)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	res := &probe.Result{Kind: probe.KindUDP, Tool: "cnperf", Src: cli.LocalAddr().String(),
		Dst: cli.Ctrl.Conn().RemoteAddr().String(), DSCP: spec.DSCP(), TOS: spec.TOSByte(),
		StartedAt: env.Clock()()}

	clock, cerr := engine.SyncClock(ctx, cli.Ctrl, clockSamples)
	sd := startData{Latency: cerr == nil}
	if cerr != nil {
		if ctx.Err() != nil {
			return nil, cerr
		}
		res.Notes = append(res.Notes, fmt.Sprintf("no one-way latency: the clocks could not be compared (%v)", cerr))
	} else {
		res.Clock = &clock
		if !clock.SameClock {
			off := int64(clock.OffsetMs * 1e6) // responder minus client
			if spec.Reverse {
				sd.OffsetNs = -off
			} else {
				sd.OffsetNs = off
			}
			res.Notes = append(res.Notes, fmt.Sprintf(
				"the two ends read different clocks: one-way latencies are corrected by the estimated offset %.3f ms and carry ± %.3f ms of error",
				clock.OffsetMs, clock.ErrorBoundMs))
		}
	}

	// The data socket: connected to the responder's UDP port (same number
	// as the control connection's), opened here so it lives in the
	// caller's network namespace.
	raddr := cli.Ctrl.Conn().RemoteAddr().(*net.TCPAddr)
	d := net.Dialer{Control: engine.SockOpts{TOS: spec.TOSByte(), RecvTOS: true, RecvTstamp: true}.Control()}
	if spec.Source != "" || spec.SourcePort != 0 {
		d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(spec.Source), Port: spec.SourcePort}
	}
	c, err := d.DialContext(ctx, "udp", raddr.String())
	if err != nil {
		return nil, fmt.Errorf("open udp socket to %s: %w", raddr, err)
	}
	conn := c.(*net.UDPConn)
	defer conn.Close()

	var tx txReport
	var rx rxReport
	if spec.Reverse {
		tx, rx, err = p.receive(ctx, cli, conn, spec, sd, env)
	} else {
		tx, rx, err = p.send(ctx, cli, conn, spec, sd, env)
	}
	if err != nil {
		return nil, err
	}
	log.Debug("udp test done", "sent", tx.Sent, "received", rx.Received)
	fill(res, spec, tx, rx)
	if ctx.Err() != nil { // interrupted: the figures cover the time until then
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	return res, nil
}

// ctrlEvents reads the control connection on its own goroutine during a
// test.
type ctrlEvents struct {
	msgs chan engine.Message // stop or result
	err  chan error

	mu     sync.Mutex // guards live and closed
	live   int        // interval reports passed on
	closed bool       // no more live reports are passed on
}

// closeLive stops passing live interval reports on and returns how many
// were: the result (which may come as a datagram, ahead of reports still
// on the control connection) passes on the rest, each once.
func (ev *ctrlEvents) closeLive() int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.closed = true
	return ev.live
}

func readControl(ctx context.Context, ctrl *engine.ControlConn, env probe.Env, onMsg func()) *ctrlEvents {
	ev := &ctrlEvents{msgs: make(chan engine.Message, 1), err: make(chan error, 1)}
	go func() {
		for {
			m, err := ctrl.RecvNoDeadline(ctx)
			if err != nil {
				ev.err <- err
				if onMsg != nil {
					onMsg()
				}
				return
			}
			if m.Type == msgInterval {
				var iv probe.Interval
				ev.mu.Lock()
				if !ev.closed {
					if json.Unmarshal(m.Data, &iv) == nil && env.OnInterval != nil {
						env.OnInterval(iv)
					}
					ev.live++
				}
				ev.mu.Unlock()
				continue
			}
			ev.msgs <- m
			if onMsg != nil {
				onMsg()
			}
			return
		}
	}()
	return ev
}

// send is the forward test: this side sends, the responder counts.
func (p *Prober) send(ctx context.Context, cli *engine.Client, conn *net.UDPConn, spec probe.Spec, sd startData, env probe.Env) (txReport, rxReport, error) {
	if _, err := udpio.SetSendBuffer(conn, 4<<20); err != nil {
		env.Log().Debug("udp send buffer", "err", err)
	}
	// The sender writes on a blocking duplicate outside Go's poller (see
	// engine.DetachFd): in the poller, every batch the kernel frees woke a
	// poller thread, which cost more CPU than the sending at 100 Mbit/s.
	from := conn.LocalAddr().(*net.UDPAddr).AddrPort() // before conn is closed
	fd, err := engine.DetachFd(conn)
	if err != nil {
		return txReport{}, rxReport{}, err
	}
	defer unix.Close(fd)
	conn.Close()
	tv := unix.NsecToTimeval(sendTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return txReport{}, rxReport{}, fmt.Errorf("udp send timeout: %w", err)
	}
	snd, err := udpio.NewSenderFd(fd, offloadOptions(p.Opts, spec))
	if err != nil {
		return txReport{}, rxReport{}, err
	}
	sd.From = from.String()
	if p.nameFrom != nil {
		sd.From = p.nameFrom(from)
	}
	if err := start(ctx, cli, spec, sd); err != nil {
		return txReport{}, rxReport{}, err
	}
	// An interrupt (ctx ending) stops the sending only: the stop and the
	// responder's result still travel, bounded by post, so the caller
	// gets the figures until then, as iperf3 on SIGINT.
	post, cancelPost := context.WithTimeout(context.WithoutCancel(ctx),
		spec.Duration.D()+drainMax+stopGrace+2*spec.TimeoutOr(engine.DefaultControlTimeout)+slack)
	defer cancelPost()
	sctx, stopSend := context.WithCancel(post)
	defer stopSend()
	defer context.AfterFunc(ctx, stopSend)()
	ev := readControl(post, cli.Ctrl, env, stopSend)

	type sendOut struct {
		tx  txReport
		err error
	}
	done := make(chan sendOut, 1)
	go func() { // send locks its thread; keep that off the caller's
		tx, err := send(sctx, snd, plan(cli.Session, spec))
		done <- sendOut{tx, err}
	}()
	out := <-done
	interrupted := ctx.Err() != nil
	select {
	case err := <-ev.err:
		return txReport{}, rxReport{}, fmt.Errorf("responder %s: %w", cli.Target, err)
	case m := <-ev.msgs:
		return txReport{}, rxReport{}, fmt.Errorf("control protocol: unexpected %q message during the test", m.Type)
	default:
	}
	if out.err != nil && !(interrupted && errors.Is(out.err, context.Canceled)) {
		return txReport{}, rxReport{}, out.err
	}
	// The receiver's result comes on the control connection or as a
	// datagram, whichever arrives first: the stop this side sends, and
	// the acknowledgements the responder's control connection needs, may
	// wait behind the flood in a limiter's queue toward the receiver.
	dgrams := make(chan []byte, 1)
	stopReading := readResultDatagrams(fd, cli.Session, dgrams)
	defer stopReading()
	b, _ := json.Marshal(out.tx)
	if err := cli.Ctrl.Send(post, engine.Message{Type: engine.MsgStop, Data: b}); err != nil {
		return txReport{}, rxReport{}, err
	}
	wait := time.NewTimer(drainMax + stopGrace + spec.TimeoutOr(engine.DefaultControlTimeout))
	defer wait.Stop()
	var raw []byte
	select {
	case m := <-ev.msgs:
		if m.Type != engine.MsgResult {
			return txReport{}, rxReport{}, fmt.Errorf("control protocol: want %q message, got %q", engine.MsgResult, m.Type)
		}
		raw = m.Data
	case raw = <-dgrams:
	case err := <-ev.err:
		return txReport{}, rxReport{}, fmt.Errorf("wait for the responder's result: %w", err)
	case <-wait.C:
		return txReport{}, rxReport{}, errors.New("the responder sent no result in time")
	case <-post.Done():
		return txReport{}, rxReport{}, fmt.Errorf("wait for the responder's result: %w", post.Err())
	}
	var rx rxReport
	if err := json.Unmarshal(raw, &rx); err != nil {
		return txReport{}, rxReport{}, fmt.Errorf("decode the responder's result: %w", err)
	}
	// Intervals closed after the live reports stopped (the last one).
	live := ev.closeLive()
	if env.OnInterval != nil {
		for _, iv := range rx.Intervals[min(live, len(rx.Intervals)):] {
			env.OnInterval(iv)
		}
	}
	return out.tx, rx, nil
}

// readResultDatagrams reads the connected data socket fd (blocking, outside
// Go's poller) for the responder's result datagram of session and passes
// its JSON on; the returned func stops the reader and waits for it.
func readResultDatagrams(fd int, session engine.SessionID, out chan<- []byte) (stop func()) {
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1<<16)
		for !done.Load() {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
					time.Sleep(5 * time.Millisecond) // an ICMP error: go on
				}
				continue
			}
			if js, ok := parseResultDatagram(session, buf[:n]); ok {
				out <- append([]byte(nil), js...)
				return
			}
		}
	}()
	return func() { done.Store(true); wg.Wait() }
}

// start tells the responder to begin and waits for its go-ahead.
func start(ctx context.Context, cli *engine.Client, spec probe.Spec, sd startData) error {
	b, _ := json.Marshal(sd)
	if err := cli.Ctrl.Send(ctx, engine.Message{Type: engine.MsgStart, Data: b}); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, spec.TimeoutOr(engine.DefaultControlTimeout))
	defer cancel()
	if _, err := cli.Ctrl.Expect(wctx, engine.MsgStart); err != nil {
		return fmt.Errorf("start the test: %w", err)
	}
	return nil
}

// receive is the reverse test: the responder sends, this side counts.
func (p *Prober) receive(ctx context.Context, cli *engine.Client, conn *net.UDPConn, spec probe.Spec, sd startData, env probe.Env) (txReport, rxReport, error) {
	var notes []string
	if got, err := udpio.SetRecvBuffer(conn, recvBuffer); err != nil {
		notes = append(notes, fmt.Sprintf("receiver: %v (buffer %d bytes)", err, got))
	}
	rcv, err := udpio.NewReceiver(conn, 32, 1<<16, offloadOptions(p.Opts, spec))
	if err != nil {
		return txReport{}, rxReport{}, err
	}
	// The return-address handshake: hellos, the responder's cookie to
	// where they came from, its echo on the control connection.
	if err := startReverse(ctx, cli, conn, spec, sd); err != nil {
		return txReport{}, rxReport{}, err
	}

	rx := newReceiver(cli.Session, sd, spec, time.Now)
	cpu0 := engine.SampleCPU()
	// An interrupt (ctx ending) asks the responder to stop sending: its
	// stop (what it sent) and the drain still happen, bounded by post, so
	// the caller gets the figures until then, as iperf3 on SIGINT.
	post, cancelPost := context.WithTimeout(context.WithoutCancel(ctx),
		spec.Duration.D()+drainMax+2*spec.TimeoutOr(engine.DefaultControlTimeout)+slack)
	defer cancelPost()
	// A control message (the sender's stop, or an error) or the interrupt
	// wakes the read loop by moving the read deadline to now.
	wake := func() { _ = conn.SetReadDeadline(time.Now()) }
	defer context.AfterFunc(ctx, wake)()
	ev := readControl(post, cli.Ctrl, env, wake)
	var askedStop time.Time // when the interrupt asked the responder to stop
	account := func(pkt []byte, _ netip.AddrPort, m *udpio.Meta) {
		rx.add(pkt, m.TOS, m.TOSOK, m.KernelNs, m.Drops, m.DropsOK)
	}
	ivLen := spec.Interval.D()
	nextIv := time.Now().Add(ivLen)
	hardEnd := time.Now().Add(spec.Duration.D() + slack)
	var tx txReport
	live := 0 // intervals passed on
	stopped := false
	var drainEnd, lastArrival time.Time
	for {
		dl := nextIv
		if stopped {
			dl = lastArrival.Add(drainQuiet)
			if dl.After(drainEnd) {
				dl = drainEnd
			}
		}
		_ = conn.SetReadDeadline(dl)
		if !stopped {
			select {
			case m := <-ev.msgs:
				if m.Type != engine.MsgStop {
					return txReport{}, rxReport{}, fmt.Errorf("control protocol: unexpected %q message during the test", m.Type)
				}
				if err := json.Unmarshal(m.Data, &tx); err != nil {
					return txReport{}, rxReport{}, fmt.Errorf("decode the responder's stop: %w", err)
				}
				stopped, lastArrival, drainEnd = true, time.Now(), time.Now().Add(drainMax)
				continue
			case err := <-ev.err:
				return txReport{}, rxReport{}, fmt.Errorf("responder %s: %w", cli.Target, err)
			default:
			}
		}
		n, err := rcv.Recv(account)
		now := time.Now()
		if n > 0 {
			lastArrival = now
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			if udpio.IsRefused(err) {
				continue // an ICMP error from an earlier hello; the data still comes
			}
			return txReport{}, rxReport{}, fmt.Errorf("receive datagrams: %w", err)
		}
		if !now.Before(nextIv) && !stopped {
			iv := rx.tick(now)
			if env.OnInterval != nil {
				env.OnInterval(iv)
			}
			live++
			nextIv = nextIv.Add(ivLen)
			if nextIv.Before(now) {
				nextIv = now.Add(ivLen)
			}
		}
		if stopped && (rx.received() >= tx.Sent || !now.Before(dl)) {
			break
		}
		if now.After(hardEnd) {
			return txReport{}, rxReport{}, errors.New("the responder never said it stopped sending")
		}
		if ctx.Err() != nil && !stopped {
			if askedStop.IsZero() {
				if err := cli.Ctrl.Send(post, engine.Message{Type: engine.MsgStop}); err != nil {
					return txReport{}, rxReport{}, fmt.Errorf("stop the responder: %w", err)
				}
				askedStop = now
				hardEnd = now.Add(spec.TimeoutOr(engine.DefaultControlTimeout))
				nextIv = now.Add(ivLen) // the rest of the period is the final report's
			}
		}
	}
	_ = cli.Ctrl.Send(post, engine.Message{Type: engine.MsgStop})
	use := engine.CPUUseBetween(cpu0, engine.SampleCPU())
	rep := rx.report(lastArrival, use.Pct, rcv.Mode().RecvString())
	rep.CPUUserPct, rep.CPUSystemPct = cpuSplit(use)
	if env.OnInterval != nil {
		for _, iv := range rep.Intervals[min(live, len(rep.Intervals)):] {
			env.OnInterval(iv)
		}
	}
	rep.Notes = append(append(rep.Notes, notes...), rcv.Notes()...)
	return tx, rep, nil
}

// fill writes the figures of both ends into res.
func fill(res *probe.Result, spec probe.Spec, tx txReport, rx rxReport) {
	secs := float64(tx.DurationNs) / 1e9
	res.DurationS = secs
	lost := max(tx.Sent-rx.Received, 0)
	res.Packets = &probe.PacketCounts{Sent: tx.Sent, Received: rx.Received, Lost: lost,
		OutOfOrder: rx.OutOfOrder, Duplicate: rx.Duplicate}
	res.LossPct = probe.Float(stats.LossPct(lost, tx.Sent))
	res.JitterMs = probe.Float(rx.JitterMs)
	// Throughput counts UDP payload bits (as iperf3 does), both ends over
	// the sender's schedule, so the two figures differ only by loss.
	res.Bytes = &probe.SenderReceiver{Sender: float64(tx.Bytes), Receiver: float64(rx.Bytes)}
	res.ThroughputBps = &probe.SenderReceiver{}
	if secs > 0 {
		res.ThroughputBps.Sender = float64(tx.Bytes) * 8 / secs
		res.ThroughputBps.Receiver = float64(rx.Bytes) * 8 / secs
		res.PPS = probe.Float(float64(rx.Received) / secs)
	}
	res.SetCPU(tx.CPUPct, rx.CPUPct, cpuUse(tx.CPUPct, tx.CPUUserPct, tx.CPUSystemPct), cpuUse(rx.CPUPct, rx.CPUUserPct, rx.CPUSystemPct))
	res.SendMode, res.RecvMode = tx.Mode, rx.Mode
	if tx.Burst > 0 {
		res.BurstDatagrams = probe.Int(tx.Burst)
	}
	res.LatencyMs = rx.Latency
	res.Histogram = rx.Histogram
	res.Intervals = rx.Intervals
	if rx.TOS != nil {
		d := *rx.TOS >> 2
		res.DSCPReceived = probe.Int(d)
		res.DSCPSurvived = probe.Bool(d == spec.DSCP())
		if rx.MixedTOS {
			res.Notes = append(res.Notes, "datagrams arrived with different DSCP marks; dscp_received is the last one's")
		}
	}
	senderAt, receiverAt := "client", "responder"
	if spec.Reverse {
		senderAt, receiverAt = "responder", "client"
	}
	res.Notes = append(res.Notes, fmt.Sprintf("sender (%s): %s; receiver (%s): %s", senderAt, describeMode(tx.Mode, true), receiverAt, describeMode(rx.Mode, false)))
	res.Notes = append(res.Notes, tx.Notes...)
	res.Notes = append(res.Notes, rx.Notes...)
	if rx.Drops != nil && *rx.Drops > 0 {
		what := "datagrams"
		if rx.Mode == "gro" {
			what = fmt.Sprintf("packets (a GRO-merged packet of up to %d datagrams counts once)", udpio.SegmentsPerSend(spec.Size))
		}
		res.Notes = append(res.Notes, fmt.Sprintf("receiver socket dropped %d %s because its receive buffer was full: that loss is the receiving host's, not the network's", *rx.Drops, what))
	}
	if rx.Received > 0 && !rx.KernelTS {
		res.Notes = append(res.Notes, "no kernel receive timestamps: one-way latency includes the receiver's wake-up time")
	}
	if rx.Stray > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d datagrams of the session were not probe data and were ignored", rx.Stray))
	}
}

func describeMode(m string, sending bool) string {
	switch {
	case m == "gso" && sending:
		return "sendmmsg with UDP GSO"
	case m == "gro":
		return "recvmmsg with UDP GRO"
	case m == "mmsg" && sending:
		return "sendmmsg, one datagram per entry"
	case m == "mmsg":
		return "recvmmsg, one datagram per entry"
	case m == "plain":
		return "one datagram per system call"
	case m == "unknown":
		return "the responder's shared reader (mode not known)"
	}
	return m
}
