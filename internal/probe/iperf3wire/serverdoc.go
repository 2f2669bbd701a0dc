package iperf3wire

import (
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/iperf3json"
)

// serverDoc builds the responder's own iperf3 document for a test, the one
// `iperf3 -s -J` would write, which a client that asks for
// --get-server-output receives as server_output_json.
type serverDoc struct {
	p          Params
	doc        iperf3json.Doc
	congestion string // TCP_CONGESTION of the data sockets ("" for udp)
	sndbuf     int    // what the kernel gave for -w
	rcvbuf     int
}

// newServerDoc starts the document of a test on control connection c.
func newServerDoc(p Params, c net.Conn, cookie string) *serverDoc {
	d := &serverDoc{p: p}
	d.doc.Start = iperf3json.Start{Version: "cnperf", SystemInfo: systemInfo(), Cookie: cookie,
		TargetBitrate: p.Bandwidth}
	if h, port := hostPort(c.RemoteAddr()); h != "" {
		d.doc.Start.AcceptedConnection = &iperf3json.Connecting{Host: h, Port: port}
	}
	proto := "TCP"
	if p.UDP {
		proto = "UDP"
	}
	rev := 0
	if p.Reverse {
		rev = 1
	}
	d.doc.Start.TestStart = &iperf3json.TestStart{Protocol: proto, NumStreams: p.Parallel, Blksize: p.Len, Omit: p.Omit,
		Duration: p.Time, Bytes: int(p.Bytes), Blocks: int(p.Blocks), Reverse: rev, TOS: p.TOS, TargetBitrate: p.Bandwidth}
	if p.TCP && p.MSS == 0 {
		if mss, err := tcpMSS(c); err == nil {
			d.doc.Start.TCPMSSDefault = mss
		}
	}
	d.doc.Start.SockBufsize = p.Window
	return d
}

// addTCP records a TCP data stream and what its socket holds. With -M,
// tcp_mss is the MSS the first data socket holds as the kernel reports it
// (at most -M), where iperf3 repeats -M.
func (d *serverDoc) addTCP(st *stream, info tcpSockInfo) {
	d.connected(st.id, st.conn.LocalAddr(), st.conn.RemoteAddr())
	if d.p.MSS > 0 && d.doc.Start.TCPMSS == 0 {
		d.doc.Start.TCPMSS = info.mss
	}
	if d.congestion == "" {
		d.congestion = info.congestion
	}
	d.sndbuf, d.rcvbuf = info.sndbuf, info.rcvbuf
}

// addUDP records a UDP data stream on the responder's socket.
func (d *serverDoc) addUDP(st *stream, local net.Addr) {
	d.connected(st.id, local, net.UDPAddrFromAddrPort(st.peer))
}

func (d *serverDoc) connected(id int, local, remote net.Addr) {
	lh, lp := hostPort(local)
	rh, rp := hostPort(remote)
	d.doc.Start.Connected = append(d.doc.Start.Connected, iperf3json.Connected{Socket: id, LocalHost: lh, LocalPort: lp, RemoteHost: rh, RemotePort: rp})
}

// finish fills the document's end from the server's figures (snap, res)
// and the client's (theirs): per stream the sender's and the receiver's,
// and their sums per direction, the direction the test asked for first
// (client to server, or server to client with -R); --bidir's other
// direction is not summed, as its streams are in end.streams.
func (d *serverDoc) finish(streams []*stream, snap []streamResult, intervals []iperf3json.Interval, res, theirs results, start, countFrom, end time.Time) *iperf3json.Doc {
	doc := d.doc
	doc.Intervals = intervals
	doc.Start.Timestamp = &iperf3json.Timestamp{Time: start.UTC().Format(iperf3json.TimeFormat), Timesecs: start.Unix()}
	if d.p.Window > 0 {
		doc.Start.SndbufActual, doc.Start.RcvbufActual = d.sndbuf, d.rcvbuf
	}
	peer := map[int]streamResult{}
	for _, s := range theirs.Streams {
		peer[int(s.ID)] = s
	}
	// The server sends in the asked-for direction with -R only.
	mainSends := d.p.Reverse
	sent := iperf3json.Sum{Sender: mainSends}
	recv := iperf3json.Sum{Sender: mainSends}
	var lost, pkts, ooo int64
	var jitter float64
	n := 0
	for i, st := range streams {
		mine, their := snap[i], peer[st.id]
		sFig, rFig := their, mine
		if st.sender {
			sFig, rFig = mine, their
		}
		secs := func(r streamResult) float64 {
			if v := r.EndTime - r.StartTime; v > 0 {
				return v
			}
			return mine.EndTime - mine.StartTime
		}
		s := iperf3json.Sum{Socket: st.id, End: secs(sFig), Seconds: secs(sFig), Bytes: sFig.Bytes, BitsPerSecond: rate(sFig.Bytes, secs(sFig)), Sender: st.sender}
		r := iperf3json.Sum{Socket: st.id, End: secs(rFig), Seconds: secs(rFig), Bytes: rFig.Bytes, BitsPerSecond: rate(rFig.Bytes, secs(rFig)), Sender: st.sender}
		if d.p.TCP && known(sFig.Retransmits) {
			v := int64(sFig.Retransmits)
			s.Retransmits = &v
		}
		if st.sender != mainSends {
			if d.p.TCP {
				doc.End.Streams = append(doc.End.Streams, iperf3json.EndStream{Sender: &s, Receiver: &r})
			}
			continue
		}
		if d.p.UDP {
			u := s
			u.JitterMs = ptr(rFig.Jitter * 1000)
			u.LostPackets, u.Packets = ptr(int64(rFig.Errors)), ptr(int64(sFig.Packets))
			u.LostPercent = ptr(percent(rFig.Errors, sFig.Packets))
			if st.recv != nil {
				ooo += st.recv.snapshot().outOfOrder
			}
			doc.End.Streams = append(doc.End.Streams, iperf3json.EndStream{UDP: &u})
			lost += int64(rFig.Errors)
			pkts += int64(sFig.Packets)
			jitter += rFig.Jitter
		} else {
			doc.End.Streams = append(doc.End.Streams, iperf3json.EndStream{Sender: &s, Receiver: &r})
		}
		if n == 0 { // iperf3 takes the first stream's times for the sums
			sent.End, sent.Seconds, recv.End, recv.Seconds = s.Seconds, s.Seconds, r.Seconds, r.Seconds
		}
		n++
		sent.Bytes += s.Bytes
		recv.Bytes += r.Bytes
		if s.Retransmits != nil {
			sent.Retransmits = ptr(deref(sent.Retransmits) + *s.Retransmits)
		}
	}
	sent.BitsPerSecond, recv.BitsPerSecond = rate(sent.Bytes, sent.Seconds), rate(recv.Bytes, recv.Seconds)
	if d.p.UDP {
		sum := sent
		sum.JitterMs = ptr(1000 * jitter / float64(max(n, 1)))
		sum.LostPackets, sum.Packets = ptr(lost), ptr(pkts)
		sum.LostPercent = ptr(percent(float64(lost), float64(pkts)))
		sum.OutOfOrder = ptr(ooo)
		doc.End.Sum = &sum
	}
	doc.End.SumSent, doc.End.SumReceived = &sent, &recv
	doc.End.CPU = &iperf3json.CPU{HostTotal: res.CPUUtilTotal, HostUser: res.CPUUtilUser, HostSystem: res.CPUUtilSystem,
		RemoteTotal: theirs.CPUUtilTotal, RemoteUser: theirs.CPUUtilUser, RemoteSystem: theirs.CPUUtilSystem}
	if d.p.TCP {
		doc.End.SenderTCPCongestion, doc.End.ReceiverTCPCongestion = theirs.CongestionUsed, d.congestion
		if mainSends {
			doc.End.SenderTCPCongestion, doc.End.ReceiverTCPCongestion = d.congestion, theirs.CongestionUsed
		}
	}
	return &doc
}

// systemInfo is this host's start.system_info as iperf3's get_system_info
// writes it: uname's sysname, nodename, release, version and machine.
func systemInfo() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return strings.Join([]string{unix.ByteSliceToString(u.Sysname[:]), unix.ByteSliceToString(u.Nodename[:]),
		unix.ByteSliceToString(u.Release[:]), unix.ByteSliceToString(u.Version[:]), unix.ByteSliceToString(u.Machine[:])}, " ")
}

func ptr[T any](v T) *T { return &v }

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func percent(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return 100 * part / whole
}

// hostPort splits an address as iperf3 writes it (v4-mapped as IPv4).
func hostPort(a net.Addr) (string, int) {
	if a == nil {
		return "", 0
	}
	h, p, err := net.SplitHostPort(a.String())
	if err != nil {
		return "", 0
	}
	if ip := net.ParseIP(h); ip != nil && ip.To4() != nil {
		h = ip.To4().String()
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// tcpMSS reads TCP_MAXSEG of connection c.
func tcpMSS(c net.Conn) (int, error) {
	var mss int
	err := control(c, func(fd int) error {
		var err error
		mss, err = getsockoptMSS(fd)
		return err
	})
	return mss, err
}
