package icmp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/stats"
)

// Ping defaults and limits.
const (
	DefaultPingCount    = 5
	DefaultPingSize     = 56 // payload bytes, as ping(8)
	DefaultPingInterval = time.Second
	// MinPingInterval is the shortest interval accepted, with either
	// socket.
	MinPingInterval = time.Millisecond
	// MinPingTimeout is the default per-reply timeout unless twice the
	// interval is longer.
	MinPingTimeout = 2 * time.Second
	// rxStampWait bounds the wait for the kernel's receive time-stamping
	// to take effect (see engine.HoldRxTimestamps).
	rxStampWait = 200 * time.Millisecond
)

// Ping is the "ping" prober: ICMP echo requests to a host.
//
// Count echoes are sent (default 5), Interval apart (default 1 s). With
// Count 0 and Duration set, echoes go out until Duration has passed. After
// the last echo, Run waits for outstanding replies up to Timeout (default
// max(2 s, 2 × Interval)), which also bounds each reply.
type Ping struct {
	// Socket forces the socket type: SocketAuto (datagram, else raw),
	// SocketDgram or SocketRaw.
	Socket string
}

// Name returns "ping".
func (Ping) Name() string { return probe.KindPing }

// Validate rejects specs ping cannot honour anywhere.
func (p Ping) Validate(s probe.Spec) error {
	errs := validateHostSpec(s)
	if s.Size > maxPayload {
		errs = append(errs, fmt.Errorf("size %d: at most %d payload bytes fit in an IP packet", s.Size, maxPayload))
	}
	if iv := s.Interval.D(); iv > 0 && iv < MinPingInterval {
		errs = append(errs, fmt.Errorf("interval %v: below the %v minimum", iv, MinPingInterval))
	}
	if err := checkSocketMode(p.Socket); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// pingRun is the state of one run; only Run's goroutine touches it.
type pingRun struct {
	onReply func(probe.Reply) // live output, may be nil
	dst     netip.Addr
	sa      unix.Sockaddr
	c       *conn
	id      int // echo identifier expected in replies
	token   [8]byte
	size    int
	timeout time.Duration

	sent     []time.Time // by echo index, taken right before the send call
	replied  []bool
	rtts     []float64 // ms, replies within timeout
	late     int
	dups     int
	noKernTS int
	tos      map[int]int // DSCP of replies → count
	sendErrs int
	firstErr error
	df       bool  // DF set: a send refused as too big is a finding, not a failure
	tooBig   int64 // sends refused with EMSGSIZE
}

// Run pings spec.Target.
func (p Ping) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	log := env.Log().With("probe", probe.KindPing, "dst", spec.Target)
	interval := spec.IntervalOr(DefaultPingInterval)
	// RTTs come from kernel receive timestamps from the first reply on.
	defer engine.HoldRxTimestamps(rxStampWait)()
	timeout := spec.TimeoutOr(max(MinPingTimeout, 2*interval))
	size := spec.Size
	if size == 0 {
		size = DefaultPingSize
	}
	count, dur := spec.Count, spec.Duration.D()
	if count == 0 && dur == 0 {
		count = DefaultPingCount
	}

	var src netip.Addr
	if spec.Source != "" {
		src, _ = netip.ParseAddr(spec.Source)
	}
	dst, err := resolve(ctx, spec.Target, src)
	if err != nil {
		return nil, fmt.Errorf("ping: %w", err)
	}
	local, err := routeSource(ctx, dst, src)
	if err != nil {
		return nil, fmt.Errorf("ping: %w", err)
	}
	sa, err := sockaddr(dst, 0)
	if err != nil {
		return nil, fmt.Errorf("ping: %w", err)
	}
	c, err := openICMP(dst.Is6(), p.Socket, src)
	if err != nil {
		return nil, fmt.Errorf("ping %s: %w", dst, err)
	}
	defer c.Close()
	opts := engine.SockOpts{TOS: spec.TOSByte(), RecvTOS: true, RecvTstamp: true}
	if err := c.control(func(fd int) error { return opts.Apply(fd, c.v6) }); err != nil {
		return nil, fmt.Errorf("ping %s: socket options: %w", dst, err)
	}
	if spec.DontFragment {
		if err := c.control(func(fd int) error { return setDontFragment(fd, c.v6) }); err != nil {
			return nil, fmt.Errorf("ping %s: set DF: %w", dst, err)
		}
	}
	if err := c.filterEchoReplies(); err != nil {
		log.Debug("icmp filter not set", "err", err)
	}

	r := &pingRun{dst: dst, sa: sa, c: c, size: size, timeout: timeout, tos: map[int]int{}, onReply: env.OnReply, df: spec.DontFragment}
	if _, err := rand.Read(r.token[:]); err != nil {
		return nil, fmt.Errorf("ping: random token: %w", err)
	}
	if c.dgram {
		// The kernel puts the socket's own identifier (its "port") in
		// every echo and delivers only replies that carry it.
		id, err := c.localPort()
		if err != nil {
			return nil, fmt.Errorf("ping: %w", err)
		}
		r.id = id
	} else {
		r.id = int(binary.NativeEndian.Uint16(r.token[6:8]))
	}
	stop := wakeOnCancel(ctx, c)
	defer stop()

	startedAt := env.Clock()()
	start := time.Now()
	buf := make([]byte, maxPayload+128)
	oob := make([]byte, 512)
	nextSend := start
	var lastSend time.Time
	interrupted := false
	for {
		if err := ctx.Err(); err != nil {
			if len(r.sent) == 0 {
				return nil, fmt.Errorf("ping %s: %w", dst, err)
			}
			// As ping(8) on SIGINT: the statistics of what was sent.
			interrupted = true
			break
		}
		now := time.Now()
		sending := (count == 0 || len(r.sent) < count) && (dur == 0 || now.Sub(start) < dur)
		if sending && !now.Before(nextSend) {
			if err := r.send(len(r.sent)); err != nil {
				if len(r.sent) == 1 && !(r.df && errors.Is(err, unix.EMSGSIZE)) {
					return nil, fmt.Errorf("ping: %w", sendErr(dst, err))
				}
				log.Debug("send failed", "seq", len(r.sent)-1, "err", err)
			}
			lastSend = r.sent[len(r.sent)-1]
			nextSend = nextSend.Add(interval)
			if nextSend.Before(now) { // fell behind: keep the interval from now
				nextSend = now.Add(interval)
			}
			continue
		}
		answered := len(r.rtts) + r.late
		if !sending && (answered == len(r.sent) || !now.Before(lastSend.Add(timeout))) {
			break
		}
		wait := lastSend.Add(timeout)
		if sending {
			wait = nextSend
		}
		if err := c.f.SetReadDeadline(wait); err != nil {
			return nil, fmt.Errorf("ping: set read deadline: %w", err)
		}
		if ctx.Err() != nil {
			continue // the loop's top returns the error
		}
		pkt, err := c.recv(buf, oob, false)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ping %s: %w", dst, err)
		}
		r.take(pkt)
	}
	elapsed := time.Since(start)
	res := r.result(spec, local, startedAt, elapsed, c.how, dst.String() != spec.Target)
	if interrupted {
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	return res, nil
}

// send sends echo number i, recording the send time first.
func (r *pingRun) send(i int) error {
	typ := icmp.Type(ipv4.ICMPTypeEcho)
	if r.c.v6 {
		typ = ipv6.ICMPTypeEchoRequest
	}
	msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: r.id, Seq: i & 0xffff, Data: payload(r.size, r.token)}}
	b, err := msg.Marshal(nil) // ICMPv6 checksums are filled in by the kernel
	if err != nil {
		return fmt.Errorf("marshal echo: %w", err)
	}
	r.sent = append(r.sent, time.Now())
	r.replied = append(r.replied, false)
	if err := r.c.send(b, r.sa, r.timeout); err != nil {
		if errors.Is(err, unix.EMSGSIZE) {
			r.tooBig++
		}
		r.sendErrs++
		if r.firstErr == nil {
			r.firstErr = err
		}
		return err
	}
	return nil
}

// take accounts for one received packet if it is a reply to this run.
func (r *pingRun) take(p packet) {
	proto, want := 1, icmp.Type(ipv4.ICMPTypeEchoReply)
	if r.c.v6 {
		proto, want = 58, ipv6.ICMPTypeEchoReply
	}
	m, err := icmp.ParseMessage(proto, p.data)
	if err != nil || m.Type != want {
		return
	}
	echo, ok := m.Body.(*icmp.Echo)
	if !ok || echo.ID != r.id || p.from != r.dst.WithZone("") || !hasToken(echo.Data, r.size, r.token) {
		return // another ping's reply, or not from our target
	}
	n := len(r.sent)
	// The latest echo index whose sequence number matches.
	i := n - 1 - ((n - 1 - echo.Seq) & 0xffff)
	if i < 0 || i >= n {
		return
	}
	if r.replied[i] {
		r.dups++
		return
	}
	r.replied[i] = true
	rtt, kernel := rttOf(p, r.sent[i])
	if !kernel {
		r.noKernTS++
	}
	if rtt > r.timeout {
		r.late++
		return
	}
	r.rtts = append(r.rtts, float64(rtt)/float64(time.Millisecond))
	if r.onReply != nil {
		r.onReply(probe.Reply{Seq: i, From: r.dst.String(), Bytes: r.size, RTTms: r.rtts[len(r.rtts)-1]})
	}
	if p.tosOK {
		r.tos[p.tos>>2]++
	}
}

func (r *pingRun) result(spec probe.Spec, local netip.Addr, startedAt time.Time, elapsed time.Duration, how string, named bool) *probe.Result {
	res := &probe.Result{
		Kind: probe.KindPing, Tool: "cnperf", Src: local.String(), Dst: r.dst.String(),
		DSCP: spec.DSCP(), TOS: spec.TOSByte(), StartedAt: startedAt, DurationS: elapsed.Seconds(),
	}
	sent, got := len(r.sent), len(r.rtts)
	loss := 0.0
	if sent > 0 {
		loss = 100 * float64(sent-got) / float64(sent)
	}
	res.LossPct = probe.Float(loss)
	// The counts themselves, so a window's answered requests can be summed
	// exactly (the ping mesh's availability, docs/slo.md).
	res.Packets = &probe.PacketCounts{Sent: int64(sent), Received: int64(got), Lost: int64(sent - got), Duplicate: int64(r.dups), TooBig: r.tooBig}
	if got > 0 {
		s := stats.Summarize(r.rtts)
		res.RTTms = &s
	}
	if named {
		res.Notes = append(res.Notes, fmt.Sprintf("%s resolved to %s", spec.Target, r.dst))
	}
	res.Notes = append(res.Notes, "socket: "+how)
	res.Notes = append(res.Notes, fmt.Sprintf("%d echoes of %d payload bytes sent, %d replies within %v, %d late (counted lost), %d duplicates",
		sent, r.size, got, r.timeout, r.late, r.dups))
	if r.sendErrs > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d sends failed (counted lost), first: %v", r.sendErrs, r.firstErr))
	}
	if r.noKernTS > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d replies had no usable kernel receive timestamp; their RTT was read after the socket read returned (includes wake-up time)", r.noKernTS))
	}
	if len(r.tos) > 0 {
		// The most frequent mark; a note when replies disagree.
		type kv struct{ dscp, n int }
		var all []kv
		for d, n := range r.tos {
			all = append(all, kv{d, n})
		}
		sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n || (all[i].n == all[j].n && all[i].dscp < all[j].dscp) })
		res.DSCPReceived = probe.Int(all[0].dscp)
		res.DSCPSurvived = probe.Bool(all[0].dscp == spec.DSCP())
		res.Notes = append(res.Notes, "dscp_received is the mark on the echo replies as they arrived here (Linux copies a request's TOS into its reply)")
		if len(all) > 1 {
			res.Notes = append(res.Notes, fmt.Sprintf("replies carried %d different DSCPs: %v", len(all), all))
		}
	}
	return res
}
