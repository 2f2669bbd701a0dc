package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// The iperf3 document, as iperf3 --json writes it: only the fields cnperf
// measures, under iperf3's own names, so tools reading iperf3 output
// (sum_sent/sum_received, intervals[].sum, cpu_utilization_percent) can
// read cnperf's results.
type iperf3Doc struct {
	Start     iperf3Start      `json:"start"`
	Intervals []iperf3Interval `json:"intervals"`
	End       iperf3End        `json:"end"`
	Error     string           `json:"error,omitempty"`
	// ExtraData is iperf3's --extra-data field; cnperf puts the run,
	// connection, backend and repetition there.
	ExtraData string `json:"extra_data,omitempty"`
}

type iperf3Start struct {
	Connected    []iperf3Connected `json:"connected,omitempty"`
	Version      string            `json:"version"`
	Timestamp    *iperf3Timestamp  `json:"timestamp,omitempty"`
	ConnectingTo *iperf3Connecting `json:"connecting_to,omitempty"`
	TestStart    *iperf3TestStart  `json:"test_start,omitempty"`
}

type iperf3Timestamp struct {
	Time     string `json:"time"`
	Timesecs int64  `json:"timesecs"`
}

// iperf3Connected is one of start.connected: a stream's two ends.
type iperf3Connected struct {
	Socket     int    `json:"socket"`
	LocalHost  string `json:"local_host"`
	LocalPort  int    `json:"local_port"`
	RemoteHost string `json:"remote_host"`
	RemotePort int    `json:"remote_port"`
}

type iperf3Connecting struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

type iperf3TestStart struct {
	Protocol   string `json:"protocol"`
	NumStreams int    `json:"num_streams"`
	Blksize    int    `json:"blksize"`
	Omit       int    `json:"omit"`
	Duration   int    `json:"duration"`
	Bytes      int    `json:"bytes"`
	Blocks     int    `json:"blocks"`
	Reverse    int    `json:"reverse"`
	TOS        int    `json:"tos"`
}

type iperf3Sum struct {
	Socket        int      `json:"socket,omitempty"`
	Start         float64  `json:"start"`
	End           float64  `json:"end"`
	Seconds       float64  `json:"seconds"`
	Bytes         float64  `json:"bytes"`
	BitsPerSecond float64  `json:"bits_per_second"`
	Retransmits   *int64   `json:"retransmits,omitempty"`
	JitterMs      *float64 `json:"jitter_ms,omitempty"`
	LostPackets   *int64   `json:"lost_packets,omitempty"`
	Packets       *int64   `json:"packets,omitempty"`
	LostPercent   *float64 `json:"lost_percent,omitempty"`
	OutOfOrder    *int64   `json:"out_of_order,omitempty"`
	Omitted       *bool    `json:"omitted,omitempty"`
	Sender        bool     `json:"sender"`
}

type iperf3Interval struct {
	Streams []iperf3Sum `json:"streams"`
	Sum     iperf3Sum   `json:"sum"`
}

type iperf3EndStream struct {
	Sender   *iperf3Sum `json:"sender,omitempty"`
	Receiver *iperf3Sum `json:"receiver,omitempty"`
	UDP      *iperf3Sum `json:"udp,omitempty"`
}

type iperf3End struct {
	Streams     []iperf3EndStream `json:"streams,omitempty"`
	Sum         *iperf3Sum        `json:"sum,omitempty"`
	SumSent     *iperf3Sum        `json:"sum_sent,omitempty"`
	SumReceived *iperf3Sum        `json:"sum_received,omitempty"`
	CPU         *iperf3CPU        `json:"cpu_utilization_percent,omitempty"`
}

type iperf3CPU struct {
	HostTotal   float64 `json:"host_total"`
	RemoteTotal float64 `json:"remote_total"`
}

// WriteIperf3 writes the run's tcp and udp outcomes as iperf3 --json
// documents: one document, as iperf3 writes it, for a single outcome (so
// `jq .end.sum_received.bits_per_second` reads it), a JSON array of them
// for several. It fails when the run has none.
func (r *Report) WriteIperf3(w io.Writer) error {
	var docs []iperf3Doc
	for _, o := range r.Outcomes {
		kind := o.Step.Spec.Kind
		if o.Result != nil {
			kind = o.Result.Kind
		}
		if kind != probe.KindTCP && kind != probe.KindUDP {
			continue
		}
		d := Iperf3(o)
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

// Iperf3 converts one tcp or udp outcome into an iperf3 --json document.
func Iperf3(o suite.Outcome) iperf3Doc {
	d := iperf3Doc{Start: iperf3Start{Version: "cnperf"}, Intervals: []iperf3Interval{}}
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
		d.Start.ConnectingTo = &iperf3Connecting{Host: host, Port: p}
	}
	// start.connected: the client's end (src) and the server's (dst), as
	// the result records the control connection's.
	if res.Src != "" && res.Dst != "" {
		lh, lp := splitHostPort(res.Src)
		rh, rp := splitHostPort(res.Dst)
		d.Start.Connected = []iperf3Connected{{Socket: 1, LocalHost: lh, LocalPort: lp, RemoteHost: rh, RemotePort: rp}}
	}
	if !res.StartedAt.IsZero() {
		d.Start.Timestamp = &iperf3Timestamp{Time: res.StartedAt.UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT"), Timesecs: res.StartedAt.Unix()}
	}
	proto := "TCP"
	if udp {
		proto = "UDP"
	}
	streams := max(spec.Streams, len(res.Streams), 1)
	ts := &iperf3TestStart{Protocol: proto, NumStreams: streams, Blksize: spec.Size,
		Duration: int(math.Round(res.DurationS)), TOS: res.TOS}
	if spec.Reverse {
		ts.Reverse = 1
	}
	d.Start.TestStart = ts

	// Interval reports carry the client side's figures, as iperf3's do.
	for _, iv := range res.Intervals {
		s := iperf3Sum{Socket: 1, Start: iv.StartS, End: iv.EndS, Seconds: iv.EndS - iv.StartS, Bytes: iv.Bytes,
			BitsPerSecond: iv.ThroughputBps, Omitted: probe.Bool(false), Sender: !spec.Reverse}
		if udp {
			s.Packets = iv.Packets
		} else {
			s.Retransmits = iv.Retransmits
		}
		sum := s
		sum.Socket = 0
		d.Intervals = append(d.Intervals, iperf3Interval{Streams: []iperf3Sum{s}, Sum: sum})
	}

	var sent, recv iperf3Sum
	sent = iperf3Sum{End: res.DurationS, Seconds: res.DurationS, Sender: true}
	recv = iperf3Sum{End: res.DurationS, Seconds: res.DurationS, Sender: !udp}
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
		d.End.Streams = []iperf3EndStream{{UDP: &stream}}
	} else {
		sent.Retransmits = res.Retransmits
		if len(res.Streams) > 0 {
			for _, st := range res.Streams {
				s := iperf3Sum{Socket: st.ID, End: res.DurationS, Seconds: res.DurationS, Bytes: st.Bytes.Sender,
					BitsPerSecond: st.ThroughputBps.Sender, Retransmits: st.Retransmits, Sender: true}
				rv := iperf3Sum{Socket: st.ID, End: res.DurationS, Seconds: res.DurationS, Bytes: st.Bytes.Receiver,
					BitsPerSecond: st.ThroughputBps.Receiver, Sender: true}
				d.End.Streams = append(d.End.Streams, iperf3EndStream{Sender: &s, Receiver: &rv})
			}
		} else {
			s, rv := sent, recv
			s.Socket, rv.Socket = 1, 1
			d.End.Streams = []iperf3EndStream{{Sender: &s, Receiver: &rv}}
		}
	}
	d.End.SumSent, d.End.SumReceived = &sent, &recv
	if res.CPUPct != nil {
		// iperf3's host is the client; the client sends unless reversed.
		c := &iperf3CPU{HostTotal: res.CPUPct.Sender, RemoteTotal: res.CPUPct.Receiver}
		if spec.Reverse {
			c.HostTotal, c.RemoteTotal = res.CPUPct.Receiver, res.CPUPct.Sender
		}
		d.End.CPU = c
	}
	return d
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
