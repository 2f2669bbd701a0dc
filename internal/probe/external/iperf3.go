package external

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/iperf3json"
)

// ParseIperf3JSON reads the output of `iperf3 -c ... --json` (tcp or udp,
// normal or reverse) into a Result with Kind "tcp" or "udp" and Tool
// "iperf3". Sender and receiver figures come from end.sum_sent and
// end.sum_received, which iperf3 fills from both ends whatever the
// direction. iperf3 reports CPU as local (host_*) and remote (remote_*):
// the client is the sender in normal mode and the receiver with -R, and
// the mapping follows that. An "error" in the document (such
// as a refused connection) is returned as the error.
func ParseIperf3JSON(b []byte) (*probe.Result, error) {
	var d iperf3json.Doc
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&d); err != nil {
		return nil, fmt.Errorf("iperf3 json: %w", err)
	}
	if d.Error != "" {
		return nil, fmt.Errorf("iperf3 reported: %s", d.Error)
	}
	ts := d.Start.TestStart
	if ts == nil {
		return nil, fmt.Errorf("iperf3 json: no start.test_start (not a client's --json output?)")
	}
	r := &probe.Result{Tool: ToolIperf3, Raw: string(b), TOS: ts.TOS, DSCP: ts.TOS >> 2}
	switch ts.Protocol {
	case "TCP":
		r.Kind = "tcp"
	case "UDP":
		r.Kind = "udp"
	default:
		return nil, fmt.Errorf("iperf3 json: protocol %q not supported (want TCP or UDP)", ts.Protocol)
	}
	reverse := ts.Reverse != 0
	if len(d.Start.Connected) > 0 {
		c := d.Start.Connected[0]
		local := net.JoinHostPort(c.LocalHost, strconv.Itoa(c.LocalPort))
		remote := net.JoinHostPort(c.RemoteHost, strconv.Itoa(c.RemotePort))
		r.Src, r.Dst = local, remote
	}
	if d.Start.Timestamp != nil && d.Start.Timestamp.Timesecs > 0 {
		r.StartedAt = time.Unix(d.Start.Timestamp.Timesecs, 0).UTC()
	}
	if reverse {
		r.Notes = append(r.Notes, "reverse mode (-R): the server sent, the client received")
	}

	sent, recv := d.End.SumSent, d.End.SumReceived
	if r.Kind == "udp" && (sent == nil || recv == nil) {
		// Older iperf3 has only end.sum for udp: the sender's bytes and the
		// receiver's loss and jitter in one object.
		if d.End.Sum == nil {
			return nil, fmt.Errorf("iperf3 json: udp result has no end.sum_sent/sum_received or end.sum")
		}
		sent, recv = d.End.Sum, d.End.Sum
	}
	if sent == nil || recv == nil {
		return nil, fmt.Errorf("iperf3 json: no end.sum_sent/end.sum_received (test did not finish?)")
	}
	r.DurationS = sent.Seconds
	r.Bytes = &probe.SenderReceiver{Sender: sent.Bytes, Receiver: recv.Bytes}
	r.ThroughputBps = &probe.SenderReceiver{Sender: sent.BitsPerSecond, Receiver: recv.BitsPerSecond}
	if c := d.End.CPU; c != nil {
		host := probe.CPUUse{Pct: c.HostTotal, UserPct: c.HostUser, SystemPct: c.HostSystem}
		remote := probe.CPUUse{Pct: c.RemoteTotal, UserPct: c.RemoteUser, SystemPct: c.RemoteSystem}
		if reverse {
			host, remote = remote, host
		}
		r.SetCPU(host.Pct, remote.Pct, &host, &remote)
	}
	if d.End.SenderTCPCongestion != "" || d.End.ReceiverTCPCongestion != "" {
		r.TCPCongestion = &probe.SenderReceiverNames{Sender: d.End.SenderTCPCongestion, Receiver: d.End.ReceiverTCPCongestion}
	}

	switch r.Kind {
	case "tcp":
		if sent.Retransmits != nil {
			r.Retransmits = probe.Int64(*sent.Retransmits)
		}
		var rttSum float64
		var rttN int
		for i, s := range d.End.Streams {
			if s.Sender == nil || s.Receiver == nil {
				return nil, fmt.Errorf("iperf3 json: tcp stream %d lacks sender or receiver", i)
			}
			sr := probe.StreamResult{ID: i + 1,
				Bytes:         probe.SenderReceiver{Sender: s.Sender.Bytes, Receiver: s.Receiver.Bytes},
				ThroughputBps: probe.SenderReceiver{Sender: s.Sender.BitsPerSecond, Receiver: s.Receiver.BitsPerSecond}}
			if s.Sender.Retransmits != nil {
				sr.Retransmits = probe.Int64(*s.Sender.Retransmits)
			}
			// mean_rtt is measured only where the sending socket is local.
			if !reverse && s.Sender.MeanRTT != nil && *s.Sender.MeanRTT > 0 {
				sr.SRTTms = probe.Float(*s.Sender.MeanRTT / 1000)
				rttSum += *s.Sender.MeanRTT / 1000
				rttN++
			}
			r.Streams = append(r.Streams, sr)
		}
		if rttN > 0 {
			r.SRTTms = probe.Float(rttSum / float64(rttN))
			r.Notes = append(r.Notes, "srtt_ms is iperf3's mean_rtt of the sender, averaged over streams")
		}
	case "udp":
		if recv.Packets == nil || recv.LostPackets == nil {
			return nil, fmt.Errorf("iperf3 json: udp result lacks packets/lost_packets")
		}
		total, lost := *recv.Packets, *recv.LostPackets
		pc := &probe.PacketCounts{Sent: total, Received: total - lost, Lost: lost}
		if sent.Packets != nil && *sent.Packets > total {
			pc.Sent = *sent.Packets
		}
		for i, s := range d.End.Streams {
			if s.UDP == nil {
				return nil, fmt.Errorf("iperf3 json: udp stream %d lacks its udp object", i)
			}
			if s.UDP.OutOfOrder != nil {
				pc.OutOfOrder += *s.UDP.OutOfOrder
			}
			r.Streams = append(r.Streams, probe.StreamResult{ID: i + 1,
				Bytes:         probe.SenderReceiver{Sender: s.UDP.Bytes, Receiver: s.UDP.Bytes},
				ThroughputBps: probe.SenderReceiver{Sender: s.UDP.BitsPerSecond, Receiver: s.UDP.BitsPerSecond}})
		}
		if len(r.Streams) > 0 {
			r.Notes = append(r.Notes, "iperf3 reports one byte count per udp stream; streams[] repeats it for sender and receiver")
		}
		r.Packets = pc
		if total > 0 {
			r.LossPct = probe.Float(100 * float64(lost) / float64(total))
		} else if recv.LostPercent != nil {
			r.LossPct = probe.Float(*recv.LostPercent)
		}
		if recv.JitterMs != nil {
			r.JitterMs = probe.Float(*recv.JitterMs)
		}
		if recv.Seconds > 0 {
			r.PPS = probe.Float(float64(pc.Received) / recv.Seconds)
		}
		r.Notes = append(r.Notes, "iperf3 measures no one-way latency: latency_ms is absent")
	}

	for _, iv := range d.Intervals {
		s := iv.Sum
		if s.IsOmitted() {
			continue
		}
		in := probe.Interval{StartS: s.Start, EndS: s.End, Bytes: s.Bytes, ThroughputBps: s.BitsPerSecond}
		if s.Retransmits != nil {
			in.Retransmits = probe.Int64(*s.Retransmits)
		}
		if s.Packets != nil {
			in.Packets = probe.Int64(*s.Packets)
		}
		if s.LostPercent != nil && !s.Sender {
			in.LossPct = probe.Float(*s.LostPercent)
		}
		if s.JitterMs != nil && !s.Sender {
			in.JitterMs = probe.Float(*s.JitterMs)
		}
		r.Intervals = append(r.Intervals, in)
	}
	if len(r.Intervals) > 0 {
		side := "sender"
		if reverse {
			side = "receiver"
		}
		r.Notes = append(r.Notes, "intervals[] are the client's ("+side+"'s) view")
	}
	if !strings.HasPrefix(d.Start.Version, "iperf 3") && d.Start.Version != "" {
		r.Notes = append(r.Notes, "unexpected iperf3 version "+d.Start.Version)
	}
	return r, nil
}
