package icmp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
)

// Trace defaults and limits.
const (
	DefaultMaxTTL       = 30
	DefaultTraceProbes  = 3
	MaxTraceProbes      = 10
	DefaultTraceTimeout = time.Second
	DefaultTraceSize    = 32 // payload bytes: 60-byte IPv4 packets, as traceroute
	// TraceBasePort is the first UDP destination port; probe i goes to
	// TraceBasePort + i.
	TraceBasePort = 33434
	// MaxSilentHops ends a trace after this many consecutive hops with no
	// answer at all.
	MaxSilentHops = 5
)

// Trace is the "trace" prober: traceroute over UDP (Proto "udp", the
// default) or ICMP echo (Proto "icmp"). Count is the number of probes per
// hop (default 3), MaxTTL the last hop tried (default 30), Timeout the
// wait for each hop's answers (default 1 s).
type Trace struct {
	// Socket forces the ICMP socket type for Proto "icmp": SocketAuto,
	// SocketDgram or SocketRaw. UDP probes always use a UDP socket.
	Socket string
}

// Name returns "trace".
func (Trace) Name() string { return probe.KindTrace }

// Validate rejects specs trace cannot honour.
func (tr Trace) Validate(s probe.Spec) error {
	errs := validateHostSpec(s)
	switch s.Proto {
	case "", "udp", "icmp":
	default:
		errs = append(errs, fmt.Errorf("proto %q: trace sends udp or icmp probes", s.Proto))
	}
	if s.MaxTTL < 0 || s.MaxTTL > 255 {
		errs = append(errs, fmt.Errorf("max ttl %d: must be 1-255", s.MaxTTL))
	}
	if s.Count > MaxTraceProbes {
		errs = append(errs, fmt.Errorf("count %d: at most %d probes per hop", s.Count, MaxTraceProbes))
	}
	if s.Size > maxPayload {
		errs = append(errs, fmt.Errorf("size %d: at most %d payload bytes fit in an IP packet", s.Size, maxPayload))
	}
	if err := checkSocketMode(tr.Socket); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// traceProbe is one probe sent.
type traceProbe struct {
	ttl  int
	sent time.Time
	// answer
	done    bool
	from    netip.Addr
	rtt     time.Duration
	reached bool
	unreach string // ICMP destination unreachable from a router: its kind
	// dscpSeen is the DSCP in the IP header the answering hop quoted.
	dscpSeen   int
	dscpSeenOK bool
}

// traceRun is the state of one run; only Run's goroutine touches it.
type traceRun struct {
	dst     netip.Addr
	c       *conn
	icmp    bool
	id      int
	token   [8]byte
	size    int
	timeout time.Duration
	probes  []traceProbe
	noKerTS int
	local   int // error-queue messages from this host (ee_origin LOCAL)
	// quotes is the raw socket that reads the hops' quoted headers (nil
	// without CAP_NET_RAW); localPort the UDP probes' source port.
	quotes    *conn
	localPort int
}

// Run traces the path to spec.Target.
func (tr Trace) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	log := env.Log().With("probe", probe.KindTrace, "dst", spec.Target)
	perHop := spec.Count
	if perHop == 0 {
		perHop = DefaultTraceProbes
	}
	maxTTL := spec.MaxTTL
	if maxTTL == 0 {
		maxTTL = DefaultMaxTTL
	}
	timeout := spec.TimeoutOr(DefaultTraceTimeout)
	size := spec.Size
	if size == 0 {
		size = DefaultTraceSize
	}
	var src netip.Addr
	if spec.Source != "" {
		src, _ = netip.ParseAddr(spec.Source)
	}
	dst, err := resolve(ctx, spec.Target, src)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	local, err := routeSource(ctx, dst, src)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	r := &traceRun{dst: dst, icmp: spec.Proto == "icmp", size: size, timeout: timeout}
	if _, err := rand.Read(r.token[:]); err != nil {
		return nil, fmt.Errorf("trace: random token: %w", err)
	}
	if r.icmp {
		r.c, err = openICMP(dst.Is6(), tr.Socket, src)
	} else {
		r.c, err = openUDP(dst.Is6(), src)
	}
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", dst, err)
	}
	c := r.c
	defer c.Close()
	opts := engine.SockOpts{TOS: spec.TOSByte(), RecvTstamp: true}
	if err := c.control(func(fd int) error { return opts.Apply(fd, c.v6) }); err != nil {
		return nil, fmt.Errorf("trace %s: socket options: %w", dst, err)
	}
	if err := c.setRecvErr(); err != nil {
		return nil, fmt.Errorf("trace %s: %w", dst, err)
	}
	if r.icmp {
		if err := c.filterEchoReplies(); err != nil {
			log.Debug("icmp filter not set", "err", err)
		}
		if c.dgram {
			if r.id, err = c.localPort(); err != nil {
				return nil, fmt.Errorf("trace: %w", err)
			}
		} else {
			r.id = int(binary.NativeEndian.Uint16(r.token[6:8]))
		}
	}
	quoteNote := ""
	if !r.icmp {
		if r.localPort, err = c.localPort(); err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
	}
	if privileged() {
		if r.quotes, err = openQuoteReader(c.v6); err != nil {
			quoteNote = fmt.Sprintf("dscp_seen not reported: %v", err)
		} else {
			defer r.quotes.Close()
			quoteNote = "dscp_seen: the DSCP in the IP header each hop's ICMP error quotes (read on a raw ICMP socket)"
		}
	} else {
		quoteNote = "dscp_seen not reported: reading the IP header that each hop's ICMP error quotes needs a raw ICMP socket (CAP_NET_RAW); the error queue hands over only the quoted payload"
	}
	stop := wakeOnCancel(ctx, c)
	defer stop()

	res := &probe.Result{
		Kind: probe.KindTrace, Tool: "cnperf", Src: local.String(), Dst: dst.String(),
		DSCP: spec.DSCP(), TOS: spec.TOSByte(), StartedAt: env.Clock()(),
	}
	if dst.String() != spec.Target {
		res.Notes = append(res.Notes, fmt.Sprintf("%s resolved to %s", spec.Target, dst))
	}
	if r.icmp {
		res.Notes = append(res.Notes, fmt.Sprintf("method: ICMP echo probes on a %s; router errors read from the error queue (IP_RECVERR)", c.how))
	} else {
		res.Notes = append(res.Notes, fmt.Sprintf("method: UDP probes to ports %d+ on an unprivileged UDP socket; router errors read from the error queue (IP_RECVERR), as traceroute -U and tracepath do", TraceBasePort))
	}
	res.Notes = append(res.Notes, quoteNote)
	start := time.Now()
	buf := make([]byte, maxPayload+128)
	oob := make([]byte, 512)
	silent := 0
	for ttl := 1; ttl <= maxTTL; ttl++ {
		if ctx.Err() != nil {
			break // interrupted: the hops so far are the result
		}
		if err := c.setTTL(ttl); err != nil {
			return nil, fmt.Errorf("trace %s: %w", dst, err)
		}
		first := len(r.probes)
		for range perHop {
			if err := r.send(ttl, buf, oob); err != nil {
				return nil, fmt.Errorf("trace: %w", sendErr(dst, err))
			}
		}
		if err := r.collect(ctx, first, buf, oob); err != nil {
			if ctx.Err() == nil {
				return nil, err
			}
			break // interrupted while this hop's answers came in
		}
		r.readQuotes(buf, oob)
		hop, unreach := r.hop(ttl, first)
		res.Hops = append(res.Hops, hop)
		if env.OnHop != nil {
			env.OnHop(hop)
		}
		if hop.Reached {
			break
		}
		if unreach != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("hop %d (%s) answered destination unreachable (%s); trace stopped", ttl, hop.Addr, unreach))
			break
		}
		if hop.Addr == "" {
			silent++
			if silent >= MaxSilentHops && ttl < maxTTL {
				res.Notes = append(res.Notes, fmt.Sprintf("no answer from %d consecutive hops; trace stopped at ttl %d", silent, ttl))
				break
			}
		} else {
			silent = 0
		}
	}
	res.DurationS = time.Since(start).Seconds()
	if ctx.Err() != nil {
		if len(res.Hops) == 0 {
			return nil, fmt.Errorf("trace %s: %w before any hop answered", dst, ctx.Err())
		}
		res.Notes = append(res.Notes, probe.StoppedEarly(ctx))
	}
	if n := len(res.Hops); n > 0 && !res.Hops[n-1].Reached && ctx.Err() == nil {
		res.Notes = append(res.Notes, fmt.Sprintf("destination %s not reached", dst))
	}
	if r.noKerTS > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d answers had no usable kernel receive timestamp; their RTT was read after the socket read returned", r.noKerTS))
	}
	if r.local > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d probes failed on this host (e.g. neighbour resolution)", r.local))
	}
	return res, nil
}

// send sends the next probe with the socket's current TTL. A pending ICMP
// error can make a send fail; the error queue is then drained and the send
// tried once more.
func (r *traceRun) send(ttl int, buf, oob []byte) error {
	i := len(r.probes)
	var b []byte
	port := 0
	if r.icmp {
		typ := icmp.Type(ipv4.ICMPTypeEcho)
		if r.c.v6 {
			typ = ipv6.ICMPTypeEchoRequest
		}
		m := icmp.Message{Type: typ, Body: &icmp.Echo{ID: r.id, Seq: i & 0xffff, Data: payload(r.size, r.token)}}
		var err error
		if b, err = m.Marshal(nil); err != nil {
			return fmt.Errorf("marshal echo: %w", err)
		}
	} else {
		b = payload(r.size, r.token)
		port = TraceBasePort + i
		if port > 65535 {
			return fmt.Errorf("probe %d: out of destination ports", i)
		}
	}
	sa, err := sockaddr(r.dst, port)
	if err != nil {
		return err
	}
	r.probes = append(r.probes, traceProbe{ttl: ttl, sent: time.Now()})
	err = r.c.send(b, sa, r.timeout)
	if err != nil && isICMPErrno(err) {
		r.drain(buf, oob)
		r.probes[i].sent = time.Now()
		err = r.c.send(b, sa, r.timeout)
	}
	return err
}

// drain reads whatever is queued now, without waiting.
func (r *traceRun) drain(buf, oob []byte) {
	for {
		p, err := r.c.recvNow(buf, oob, true)
		if err != nil {
			return
		}
		r.take(p)
	}
}

// collect reads answers until the probes from first on are all answered
// or timeout has passed since the last was sent.
func (r *traceRun) collect(ctx context.Context, first int, buf, oob []byte) error {
	until := r.probes[len(r.probes)-1].sent.Add(r.timeout)
	for {
		pending := false
		for _, p := range r.probes[first:] {
			pending = pending || !p.done
		}
		if !pending || !time.Now().Before(until) {
			return nil
		}
		if err := r.c.f.SetReadDeadline(until); err != nil {
			return fmt.Errorf("trace: set read deadline: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("trace %s: %w", r.dst, err)
		}
		p, err := r.c.recv(buf, oob, true)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("trace %s: %w", r.dst, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("trace %s: %w", r.dst, err)
		}
		r.take(p)
	}
}

// take matches a packet to the probe it answers.
func (r *traceRun) take(p packet) {
	i := -1
	var from netip.Addr
	reached, unreach := false, ""
	switch {
	case p.errq:
		if !p.eeOK {
			return
		}
		if p.ee.Origin == unix.SO_EE_ORIGIN_LOCAL {
			r.local++
			return
		}
		if p.ee.Origin != unix.SO_EE_ORIGIN_ICMP && p.ee.Origin != unix.SO_EE_ORIGIN_ICMP6 {
			return
		}
		if p.from != r.dst.WithZone("") {
			return // an error about a packet to somewhere else
		}
		if r.icmp {
			// The quoted ICMP echo header: type, code, checksum, id, seq.
			d := p.data
			if len(d) < 8 || int(binary.BigEndian.Uint16(d[4:6])) != r.id {
				return
			}
			i = r.index(int(binary.BigEndian.Uint16(d[6:8])))
		} else {
			i = p.port - TraceBasePort
		}
		from = p.offender
		reached, unreach = classify(p.ee, r.c.v6, from == r.dst.WithZone(""))
	default:
		if !r.icmp || p.from != r.dst.WithZone("") {
			return
		}
		proto, want := 1, icmp.Type(ipv4.ICMPTypeEchoReply)
		if r.c.v6 {
			proto, want = 58, ipv6.ICMPTypeEchoReply
		}
		m, err := icmp.ParseMessage(proto, p.data)
		if err != nil || m.Type != want {
			return
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok || echo.ID != r.id || !hasToken(echo.Data, r.size, r.token) {
			return
		}
		i = r.index(echo.Seq)
		from, reached = p.from, true
	}
	if i < 0 || i >= len(r.probes) || r.probes[i].done {
		return
	}
	rtt, kernel := rttOf(p, r.probes[i].sent)
	if !kernel {
		r.noKerTS++
	}
	if rtt > r.timeout {
		return // too late: the hop has been reported already
	}
	pr := &r.probes[i]
	pr.done, pr.from, pr.rtt, pr.reached, pr.unreach = true, from, rtt, reached, unreach
}

// index maps a 16-bit sequence number to the latest probe that carried it.
func (r *traceRun) index(seq int) int {
	n := len(r.probes)
	return n - 1 - ((n - 1 - seq) & 0xffff)
}

// classify reads an ICMP error: reached is true when it comes from the
// destination (port unreachable, or any unreachable sent by it); unreach
// names a destination-unreachable sent by a router.
func classify(ee unix.SockExtendedErr, v6, fromDst bool) (reached bool, unreach string) {
	var isUnreach bool
	var portUnreach bool
	if v6 {
		isUnreach = ee.Type == 1 // ICMPv6 destination unreachable
		portUnreach = isUnreach && ee.Code == 4
	} else {
		isUnreach = ee.Type == 3
		portUnreach = isUnreach && ee.Code == 3
	}
	switch {
	case portUnreach, isUnreach && fromDst:
		return true, ""
	case isUnreach:
		return false, unreachName(v6, ee.Code)
	}
	return false, "" // time exceeded, or another message
}

func unreachName(v6 bool, code uint8) string {
	if v6 {
		switch code {
		case 0:
			return "no route (!N)"
		case 1:
			return "administratively prohibited (!X)"
		case 3:
			return "address unreachable (!H)"
		}
		return fmt.Sprintf("code %d", code)
	}
	switch code {
	case 0:
		return "network unreachable (!N)"
	case 1:
		return "host unreachable (!H)"
	case 2:
		return "protocol unreachable (!P)"
	case 4:
		return "fragmentation needed (!F)"
	case 9, 10, 13:
		return "administratively prohibited (!X)"
	}
	return fmt.Sprintf("code %d", code)
}

// hop builds the report of one TTL from its probes.
func (r *traceRun) hop(ttl, first int) (probe.Hop, string) {
	h := probe.Hop{TTL: ttl, RTTms: []float64{}}
	unreach := ""
	for _, p := range r.probes[first:] {
		if !p.done {
			continue
		}
		if h.Addr == "" {
			h.Addr = p.from.String()
		}
		if h.DSCPSeen == nil && p.dscpSeenOK {
			h.DSCPSeen = probe.Int(p.dscpSeen)
		}
		h.RTTms = append(h.RTTms, float64(p.rtt)/float64(time.Millisecond))
		h.Reached = h.Reached || p.reached
		if p.unreach != "" {
			unreach = p.unreach
		}
	}
	return h, unreach
}
