// Package wirewatch is the wire watch (probe kind "wire"): on a node's
// host network it opens an AF_PACKET socket on the device its route to a
// peer node leaves by (the underlay), attaches a classic BPF filter that
// passes only the packets of one flow (as they are, or inside VXLAN: outer
// UDP to 4789 or 8472 with the flow's inner 5-tuple), decodes the outer
// and inner IP headers of each, and reports per direction the DSCP the
// flow carried on the wire (probe.WireDSCP: wire_dscp.outer,
// wire_dscp.inner, wire_dscp.encap). It is how cnperf tells a mark lost at
// encapsulation (outer 0, inner 46) from a mark on the wire that no queue
// honoured.
//
// The watch is bounded: it ends at its duration, after its packet cap
// (Spec.Count) or when its context ends, and closes the socket however it
// ends. It needs CAP_NET_RAW, and IPv4 flows (the filter reads IPv4
// headers); no tcpdump or libpcap is involved.
package wirewatch

import (
	"context"
	"fmt"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// Defaults of a watch.
const (
	DefaultDuration = 10 * time.Second
	// DefaultPacketCap bounds the packets a watch reads.
	DefaultPacketCap = 100_000
	// MaxPacketCap is the largest cap a spec may ask for.
	MaxPacketCap = 10_000_000
	// pollInterval is how often a read returns to check the deadline.
	pollInterval = 100 * time.Millisecond
)

// Prober is the wire watch.
type Prober struct{}

// Name returns "wire".
func (Prober) Name() string { return probe.KindWire }

// Validate checks the spec: a target (the peer node, whose route names
// the device to watch), the flow, a packet cap.
func (Prober) Validate(spec probe.Spec) error {
	if err := spec.ValidateCommon(false); err != nil {
		return err
	}
	if spec.Watch == nil {
		return fmt.Errorf("watch: missing (the flow to look for: proto, src, dst, ports)")
	}
	if err := spec.Watch.Validate(); err != nil {
		return err
	}
	if spec.Count > MaxPacketCap {
		return fmt.Errorf("count %d: a watch reads at most %d packets", spec.Count, MaxPacketCap)
	}
	return nil
}

// Run watches the underlay for the spec's flow until the duration ends,
// the packet cap is reached or ctx ends, and reports what it saw.
func (p Prober) Run(ctx context.Context, spec probe.Spec, env probe.Env) (*probe.Result, error) {
	if err := p.Validate(spec); err != nil {
		return nil, fmt.Errorf("invalid wire watch: %w", err)
	}
	f, _ := flowOf(*spec.Watch)
	prog, err := Program(*spec.Watch)
	if err != nil {
		return nil, err
	}
	dev, err := underlay(spec.Target)
	if err != nil {
		return nil, err
	}
	sock, err := openSocket(dev.Index, prog, pollInterval)
	if err != nil {
		return nil, err
	}
	defer sock.Close()
	now := env.Clock()
	start := now()
	duration := spec.DurationOr(DefaultDuration)
	limit := int64(spec.Count)
	if limit == 0 {
		limit = DefaultPacketCap
	}
	env.Log().Debug("wire watch started", "interface", dev.Name, "flow", spec.Watch.String(), "duration", duration)

	var fwd, rev tally
	var undecoded int64
	var lastErr error
	buf := make([]byte, SnapLen)
	deadline := start.Add(duration)
	capped := false
	for ctx.Err() == nil && now().Before(deadline) {
		if fwd.packets+rev.packets+undecoded >= limit {
			capped = true
			break
		}
		n, timeout, err := sock.read(buf)
		if err != nil {
			return nil, err
		}
		if timeout {
			continue
		}
		pk, err := Decode(buf[:n])
		if err != nil {
			undecoded++
			lastErr = err
			continue
		}
		switch f.direction(pk) {
		case dirForward:
			fwd.add(pk)
		case dirReverse:
			rev.add(pk)
		default:
			undecoded++
			lastErr = fmt.Errorf("a packet the filter passed is not of the flow (%s %s → %s)", pk.Encap, pk.Src, pk.Dst)
		}
	}
	drops, derr := sock.dropped()
	elapsed := now().Sub(start)
	res := &probe.Result{Kind: probe.KindWire, Tool: "cnperf", Src: dev.Name, Dst: spec.Target, StartedAt: start,
		DurationS: elapsed.Seconds(),
		WireDSCP:  &probe.WireDSCP{Interface: dev.Name, WireDirection: fwd.summary(), Reverse: rev.summary(), Dropped: drops}}
	res.Notes = append(res.Notes, fmt.Sprintf("watched %s on %s for %.1f s: %d packets forward, %d reverse",
		spec.Watch, dev.Name, elapsed.Seconds(), fwd.packets, rev.packets))
	if capped {
		res.Notes = append(res.Notes, fmt.Sprintf("stopped at the packet cap of %d", limit))
	}
	if ctx.Err() != nil {
		res.Notes = append(res.Notes, "stopped early: "+context.Cause(ctx).Error())
	}
	if undecoded > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d packets could not be read as the flow's (last: %v)", undecoded, lastErr))
	}
	if derr != nil {
		res.Notes = append(res.Notes, derr.Error())
	} else if drops > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the kernel dropped %d matching packets before the watch read them", drops))
	}
	for _, d := range []struct {
		name string
		t    tally
	}{{"forward", fwd}, {"reverse", rev}} {
		if len(d.t.seen) > 1 {
			res.Notes = append(res.Notes, fmt.Sprintf("%s: headers varied: %s", d.name, d.t.describe()))
		}
	}
	return res, nil
}

// headers is what one packet carried: its encapsulation and DSCPs.
type headers struct {
	encap        string
	outer, inner int
}

// tally counts one direction's packets by headers.
type tally struct {
	packets int64
	seen    map[headers]int64
	order   []headers // first-seen order, for ties and notes
}

func (t *tally) add(p Packet) {
	if t.seen == nil {
		t.seen = map[headers]int64{}
	}
	h := headers{encap: p.Encap, outer: p.OuterDSCP, inner: p.InnerDSCP}
	if _, ok := t.seen[h]; !ok {
		t.order = append(t.order, h)
	}
	t.seen[h]++
	t.packets++
}

// summary reports the most common headers (the first seen on a tie) and
// how many packets carried others.
func (t tally) summary() probe.WireDirection {
	d := probe.WireDirection{Packets: t.packets}
	if t.packets == 0 {
		return d
	}
	best := t.order[0]
	for _, h := range t.order[1:] {
		if t.seen[h] > t.seen[best] {
			best = h
		}
	}
	d.Encap, d.Outer, d.Other = best.encap, probe.Int(best.outer), t.packets-t.seen[best]
	if best.encap != EncapNone {
		d.Inner = probe.Int(best.inner)
	}
	return d
}

func (t tally) describe() string {
	s := ""
	for i, h := range t.order {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%d × %s outer %d", t.seen[h], h.encap, h.outer)
		if h.encap != EncapNone {
			s += fmt.Sprintf(" inner %d", h.inner)
		}
	}
	return s
}
