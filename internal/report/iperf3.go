package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/iperf3json"
	"github.com/cnperf/cnperf/internal/suite"
)

// WriteIperf3 writes the run's tcp and udp outcomes as iperf3 --json
// documents: one document, as iperf3 writes it, for a single outcome (so
// `jq .end.sum_received.bits_per_second` reads it), a JSON array of them
// for several. It fails when the run has none.
func (r *Report) WriteIperf3(w io.Writer) error {
	var docs []iperf3json.Doc
	for _, o := range r.Outcomes {
		kind := o.Step.Spec.Kind
		if o.Result != nil {
			kind = o.Result.Kind
		}
		if kind != probe.KindTCP && kind != probe.KindUDP {
			continue
		}
		d := Iperf3(o, r.Environment)
		d.ExtraData = fmt.Sprintf("cnperf run=%s connection=%s backend=%s repeat=%d", r.RunID, o.Step.Connection, o.Step.Backend, o.Step.Repeat+1)
		docs = append(docs, d)
	}
	if len(docs) == 0 {
		return fmt.Errorf("run %s has no tcp or udp results to export as iperf3 JSON", r.RunID)
	}
	var v any = docs
	if len(docs) == 1 {
		v = docs[0]
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write iperf3 json: %w", err)
	}
	return nil
}

// Iperf3 converts one tcp or udp outcome into an iperf3 --json document,
// as the client (the step's source) writes it. env, when known, gives
// start.system_info: the source node's name and kernel as the run
// recorded them (iperf3 writes the measuring host's uname).
func Iperf3(o suite.Outcome, env *hostinfo.Environment) iperf3json.Doc {
	d := iperf3json.Doc{Start: iperf3json.Start{Version: "cnperf"}, Intervals: []iperf3json.Interval{}}
	res := o.Result
	if res == nil {
		d.Error = o.Err
		if d.Error == "" {
			d.Error = "no result"
		}
		return d
	}
	spec := o.Step.Spec
	udp := res.Kind == probe.KindUDP
	if host, port, err := net.SplitHostPort(firstNonEmpty(spec.Target, res.Dst)); err == nil {
		p, _ := strconv.Atoi(port)
		d.Start.ConnectingTo = &iperf3json.Connecting{Host: host, Port: p}
	}
	// start.connected: the client's end (src) and the server's (dst), as
	// the result records the control connection's.
	if res.Src != "" && res.Dst != "" {
		lh, lp := splitHostPort(res.Src)
		rh, rp := splitHostPort(res.Dst)
		d.Start.Connected = []iperf3json.Connected{{Socket: 1, LocalHost: lh, LocalPort: lp, RemoteHost: rh, RemotePort: rp}}
	}
	if !res.StartedAt.IsZero() {
		d.Start.Timestamp = &iperf3json.Timestamp{Time: res.StartedAt.UTC().Format(iperf3json.TimeFormat), Timesecs: res.StartedAt.Unix()}
	}
	d.Start.SystemInfo = systemInfo(env, o.Step.Src.Node)
	proto := "TCP"
	if udp {
		proto = "UDP"
	}
	streams := max(spec.Streams, len(res.Streams), 1)
	ts := &iperf3json.TestStart{Protocol: proto, NumStreams: streams, Blksize: spec.Size,
		Duration: int(math.Round(res.DurationS)), TOS: res.TOS}
	if spec.RateBps != nil && *spec.RateBps > 0 {
		// iperf3's target bitrate is per stream; a spec's rate is the total.
		ts.TargetBitrate = *spec.RateBps / uint64(streams)
		d.Start.TargetBitrate = ts.TargetBitrate
	}
	if spec.Reverse {
		ts.Reverse = 1
	}
	d.Start.TestStart = ts

	// Interval reports carry the client side's figures, as iperf3's do.
	for _, iv := range res.Intervals {
		s := iperf3json.Sum{Socket: 1, Start: iv.StartS, End: iv.EndS, Seconds: iv.EndS - iv.StartS, Bytes: iv.Bytes,
			BitsPerSecond: iv.ThroughputBps, Omitted: probe.Bool(false), Sender: !spec.Reverse}
		if udp {
			s.Packets = iv.Packets
		} else {
			s.Retransmits = iv.Retransmits
		}
		sum := s
		sum.Socket = 0
		d.Intervals = append(d.Intervals, iperf3json.Interval{Streams: []iperf3json.Sum{s}, Sum: sum})
	}

	var sent, recv iperf3json.Sum
	sent = iperf3json.Sum{End: res.DurationS, Seconds: res.DurationS, Sender: true}
	recv = iperf3json.Sum{End: res.DurationS, Seconds: res.DurationS, Sender: !udp}
	if res.ThroughputBps != nil {
		sent.BitsPerSecond, recv.BitsPerSecond = res.ThroughputBps.Sender, res.ThroughputBps.Receiver
	}
	if res.Bytes != nil {
		sent.Bytes, recv.Bytes = res.Bytes.Sender, res.Bytes.Receiver
	}
	if udp {
		if res.Packets != nil {
			sent.Packets, recv.Packets = &res.Packets.Sent, &res.Packets.Sent
			recv.LostPackets = &res.Packets.Lost
			sent.LostPackets = probe.Int64(0)
		}
		recv.JitterMs, recv.LostPercent = res.JitterMs, res.LossPct
		sum := recv
		sum.Sender = true
		d.End.Sum = &sum
		stream := sum
		stream.Socket = 1
		if res.Packets != nil {
			stream.OutOfOrder = &res.Packets.OutOfOrder
		}
		d.End.Streams = []iperf3json.EndStream{{UDP: &stream}}
	} else {
		sent.Retransmits = res.Retransmits
		if len(res.Streams) > 0 {
			for _, st := range res.Streams {
				s := iperf3json.Sum{Socket: st.ID, End: res.DurationS, Seconds: res.DurationS, Bytes: st.Bytes.Sender,
					BitsPerSecond: st.ThroughputBps.Sender, Retransmits: st.Retransmits, Sender: true}
				rv := iperf3json.Sum{Socket: st.ID, End: res.DurationS, Seconds: res.DurationS, Bytes: st.Bytes.Receiver,
					BitsPerSecond: st.ThroughputBps.Receiver, Sender: true}
				d.End.Streams = append(d.End.Streams, iperf3json.EndStream{Sender: &s, Receiver: &rv})
			}
		} else {
			s, rv := sent, recv
			s.Socket, rv.Socket = 1, 1
			d.End.Streams = []iperf3json.EndStream{{Sender: &s, Receiver: &rv}}
		}
	}
	d.End.SumSent, d.End.SumReceived = &sent, &recv
	d.End.CPU = iperf3CPU(res, spec.Reverse)
	if c := res.TCPCongestion; c != nil && !udp {
		d.End.SenderTCPCongestion, d.End.ReceiverTCPCongestion = c.Sender, c.Receiver
	}
	return d
}

// iperf3CPU is end.cpu_utilization_percent: iperf3's host is the client,
// which sends unless reversed. Without the user/system split (a result
// from before it was measured) those fields read 0.
func iperf3CPU(res *probe.Result, reverse bool) *iperf3json.CPU {
	if res.CPUPct == nil {
		return nil
	}
	pick := func(v *probe.SenderReceiver) (host, remote float64) {
		if v == nil {
			return 0, 0
		}
		if reverse {
			return v.Receiver, v.Sender
		}
		return v.Sender, v.Receiver
	}
	c := &iperf3json.CPU{}
	c.HostTotal, c.RemoteTotal = pick(res.CPUPct)
	c.HostUser, c.RemoteUser = pick(res.CPUUserPct)
	c.HostSystem, c.RemoteSystem = pick(res.CPUSystemPct)
	return c
}

// systemInfo is start.system_info for the named node of env: iperf3's
// "sysname nodename release" from what the run recorded of the node
// (cnperf's agents run on Linux); "" when the run recorded no kernel for
// it.
func systemInfo(env *hostinfo.Environment, node string) string {
	if env == nil || node == "" {
		return ""
	}
	for _, n := range env.Nodes {
		if n.Name == node && n.Kernel != "" {
			return "Linux " + n.Name + " " + n.Kernel
		}
	}
	return ""
}

// splitHostPort splits HOST:PORT; an address without a port is a host
// with port 0.
func splitHostPort(a string) (string, int) {
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return a, 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}
