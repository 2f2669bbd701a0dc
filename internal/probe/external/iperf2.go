package external

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
)

// The column layouts of iperf 2's enhanced (-e) reports, told apart by
// their "[ ID] Interval ..." header line.
type i2Format int

const (
	i2None      i2Format = iota
	i2TCPClient          // Transfer Bandwidth Write/Err Rtry Cwnd/RTT(var) NetPwr
	i2UDPClient          // Transfer Bandwidth Write/Err PPS
	i2TCPServer          // Transfer Bandwidth Reads=Dist
	i2UDPServer          // Transfer Bandwidth Jitter Lost/Total Latency avg/min/max/stdev PPS Rx/inP NetPwr
)

// i2Line is one report line of a section.
type i2Line struct {
	start, end  float64
	bytes, bps  float64
	writes      int64 // clients
	retry       int64 // tcp client
	rttUs       float64
	haveRTT     bool
	jitterMs    float64 // udp server
	lost, total int64
	lat         [4]float64 // avg, min, max, stdev (ms)
	haveLat     bool
	pps         float64
}

// i2Hist is one "-PDF:" histogram line.
type i2Hist struct {
	final      bool
	widthUs    float64
	counts     map[int]int64 // 1-based bin label → count
	maxBin     int
	obl, obu   int64
	population int64
}

// i2Report is one output (a client's or a server's) read line by line.
type i2Report struct {
	role          string // "client" or "server"
	proto         string // "tcp" or "udp"
	tos           *int
	tosRx         *int
	local, remote string
	bins          int
	lines         []i2Line // of the main section
	report        []i2Line // the client's "Server Report:" section
	sent          int64
	outOfOrder    int64
	hists         []i2Hist
	warnings      []string
}

var (
	i2ConnRE     = regexp.MustCompile(`^(?:Client connecting to (\S+), (TCP|UDP) port (\d+)|Server listening on (TCP|UDP) port (\d+))`)
	i2TOSRE      = regexp.MustCompile(`^TOS set to (0x[0-9a-fA-F]+|\d+)`)
	i2BinsRE     = regexp.MustCompile(`^Enabled receive histograms bin-width=[0-9.]+ ms, bins=(\d+)`)
	i2IDRE       = regexp.MustCompile(`^\[\s*(\d+|SUM|ID)\]\s?(.*)$`)
	i2LocalRE    = regexp.MustCompile(`^local (\S+?)(?:%\S+)? port (\d+) connected with (\S+) port (\d+)`)
	i2TOSRxRE    = regexp.MustCompile(`\(tos rx=(0x[0-9a-fA-F]+|\d+)\)`)
	i2SentRE     = regexp.MustCompile(`^Sent (\d+) datagrams$`)
	i2DataRE     = regexp.MustCompile(`^(\d+\.\d+)-\s*(\d+\.\d+) sec\s+([0-9.]+) (\S*Bytes)\s+([0-9.]+) (\S+/sec)\s*(.*)$`)
	i2OOORE      = regexp.MustCompile(`^(\d+\.\d+)-\s*(\d+\.\d+) sec\s+(\d+) datagrams received out-of-order$`)
	i2HistRE     = regexp.MustCompile(`^(\d+\.\d+)-\s*(\d+\.\d+) sec\s+\S+?(\(f\))?-PDF: bin\(w=([0-9.]+)(us|ms)\):cnt\((\d+)\)=(\S*) \([^)]*obl/obu=(\d+)/(\d+)\)(?: \(.*\))?$`)
	i2TCPCliRE   = regexp.MustCompile(`^(\d+)/(\d+)\s+(\d+)\s+(?:\S+/(\d+)\((\d+)\) us|\S+)\s+(?:\d+)?$`)
	i2UDPCliRE   = regexp.MustCompile(`^(\d+)/(\d+)\s+(\d+) pps$`)
	i2TCPSrvRE   = regexp.MustCompile(`^(\d+)=[0-9:]+$`)
	i2UDPSrvRE   = regexp.MustCompile(`^([0-9.]+) ms\s+(\d+)/\s*(\d+) \(([0-9.e+-]+)%\)\s+(?:([0-9.]+)/([0-9.]+)/([0-9.]+)/([0-9.]+) ms\s+)?(\d+) pps(?:\s+\d+/\d+\(\d+\) pkts)?(?:\s+\d+)?$`)
	i2Preambles  = []string{"Write buffer size:", "Read buffer size:", "TCP window size:", "UDP buffer size:", "Sending ", "Binding to local address", "Waiting for server threads", "Receiving "}
	i2Warnings   = []string{"WARNING:", "WARN:"}
	i2ByteUnits  = map[string]float64{"Bytes": 1, "KBytes": 1 << 10, "MBytes": 1 << 20, "GBytes": 1 << 30, "TBytes": 1 << 40}
	i2RateUnits  = map[string]float64{"bits/sec": 1, "Kbits/sec": 1e3, "Mbits/sec": 1e6, "Gbits/sec": 1e9, "Tbits/sec": 1e12, "Bytes/sec": 8, "KBytes/sec": 8 << 10, "MBytes/sec": 8 << 20, "GBytes/sec": 8 << 30}
	i2HeaderSets = []struct {
		f    i2Format
		want []string
	}{
		{i2UDPServer, []string{"Jitter", "Lost/Total"}},
		{i2TCPClient, []string{"Write/Err", "Rtry"}},
		{i2UDPClient, []string{"Write/Err", "PPS"}},
		{i2TCPServer, []string{"Reads=Dist"}},
	}
)

func parseI2(text, who string) (*i2Report, error) {
	rep := &i2Report{}
	format := i2None
	inReport := false
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r ")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "----") {
			continue
		}
		fail := func(why string) error {
			return fmt.Errorf("iperf2 %s output line %d %q: %s", who, i+1, line, why)
		}
		if m := i2ConnRE.FindStringSubmatch(line); m != nil {
			if m[2] != "" {
				rep.role, rep.proto = "client", strings.ToLower(m[2])
			} else {
				rep.role, rep.proto = "server", strings.ToLower(m[4])
			}
			continue
		}
		if m := i2TOSRE.FindStringSubmatch(line); m != nil {
			v, err := probe.ParseTOS(m[1])
			if err != nil {
				return nil, fail(err.Error())
			}
			rep.tos = &v
			continue
		}
		if m := i2BinsRE.FindStringSubmatch(line); m != nil {
			rep.bins, _ = strconv.Atoi(m[1])
			continue
		}
		if hasAnyPrefix(line, i2Preambles) {
			continue
		}
		if hasAnyPrefix(line, i2Warnings) {
			rep.warnings = append(rep.warnings, line)
			continue
		}
		m := i2IDRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fail("not a line of iperf2's enhanced output")
		}
		id, rest := m[1], strings.TrimSpace(m[2])
		if id == "ID" {
			format = i2None
			for _, hs := range i2HeaderSets {
				if containsAll(rest, hs.want) {
					format = hs.f
					break
				}
			}
			if format == i2None {
				return nil, fail("unknown report header")
			}
			continue
		}
		if id == "SUM" {
			return nil, fail("[SUM] lines (parallel streams) are not supported")
		}
		if lm := i2LocalRE.FindStringSubmatch(rest); lm != nil {
			rep.local, rep.remote = joinHP(lm[1], lm[2]), joinHP(lm[3], lm[4])
			if tm := i2TOSRxRE.FindStringSubmatch(rest); tm != nil {
				v, err := probe.ParseTOS(tm[1])
				if err == nil {
					rep.tosRx = &v
				}
			}
			continue
		}
		if sm := i2SentRE.FindStringSubmatch(rest); sm != nil {
			rep.sent, _ = strconv.ParseInt(sm[1], 10, 64)
			continue
		}
		if rest == "Server Report:" {
			inReport = true
			format = i2None
			continue
		}
		if om := i2OOORE.FindStringSubmatch(rest); om != nil {
			n, _ := strconv.ParseInt(om[3], 10, 64)
			// The final line repeats the sum of the intervals: keep the largest.
			if n > rep.outOfOrder {
				rep.outOfOrder = n
			}
			continue
		}
		if hm := i2HistRE.FindStringSubmatch(rest); hm != nil {
			h, err := parseI2Hist(hm)
			if err != nil {
				return nil, fail(err.Error())
			}
			rep.hists = append(rep.hists, h)
			continue
		}
		dm := i2DataRE.FindStringSubmatch(rest)
		if dm == nil {
			return nil, fail("not a report line iperf2's enhanced output has")
		}
		if format == i2None {
			return nil, fail("report line before any header")
		}
		l, err := parseI2Data(dm, format)
		if err != nil {
			return nil, fail(err.Error())
		}
		if inReport {
			rep.report = append(rep.report, l)
		} else {
			rep.lines = append(rep.lines, l)
		}
		if format == i2UDPServer && !inReport && rep.role == "" {
			rep.role = "server"
		}
	}
	if rep.role == "" {
		return nil, fmt.Errorf("iperf2 %s output: no \"Client connecting to\" or \"Server listening on\" line", who)
	}
	return rep, nil
}

func parseI2Data(dm []string, f i2Format) (i2Line, error) {
	var l i2Line
	l.start, _ = strconv.ParseFloat(dm[1], 64)
	l.end, _ = strconv.ParseFloat(dm[2], 64)
	b, _ := strconv.ParseFloat(dm[3], 64)
	bu, ok := i2ByteUnits[dm[4]]
	if !ok {
		return l, fmt.Errorf("unknown transfer unit %q", dm[4])
	}
	l.bytes = b * bu
	r, _ := strconv.ParseFloat(dm[5], 64)
	ru, ok := i2RateUnits[dm[6]]
	if !ok {
		return l, fmt.Errorf("unknown bandwidth unit %q", dm[6])
	}
	l.bps = r * ru
	rest := dm[7]
	atoi := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	switch f {
	case i2TCPClient:
		m := i2TCPCliRE.FindStringSubmatch(rest)
		if m == nil {
			return l, fmt.Errorf("want Write/Err Rtry Cwnd/RTT(var) NetPwr columns")
		}
		l.writes, l.retry = atoi(m[1]), atoi(m[3])
		if m[4] != "" {
			l.rttUs, l.haveRTT = float64(atoi(m[4])), true
		}
	case i2UDPClient:
		m := i2UDPCliRE.FindStringSubmatch(rest)
		if m == nil {
			return l, fmt.Errorf("want Write/Err PPS columns")
		}
		l.writes, l.pps = atoi(m[1]), float64(atoi(m[3]))
	case i2TCPServer:
		if !i2TCPSrvRE.MatchString(rest) {
			return l, fmt.Errorf("want a Reads=Dist column")
		}
	case i2UDPServer:
		m := i2UDPSrvRE.FindStringSubmatch(rest)
		if m == nil {
			return l, fmt.Errorf("want Jitter Lost/Total Latency PPS columns")
		}
		l.jitterMs, _ = strconv.ParseFloat(m[1], 64)
		l.lost, l.total = atoi(m[2]), atoi(m[3])
		if m[5] != "" {
			for k := 0; k < 4; k++ {
				l.lat[k], _ = strconv.ParseFloat(m[5+k], 64)
			}
			l.haveLat = true
		}
		l.pps = float64(atoi(m[9]))
	}
	return l, nil
}

func parseI2Hist(hm []string) (i2Hist, error) {
	h := i2Hist{final: hm[3] != "", counts: map[int]int64{}}
	w, err := strconv.ParseFloat(hm[4], 64)
	if err != nil || w <= 0 {
		return h, fmt.Errorf("bad bin width %q", hm[4])
	}
	if hm[5] == "ms" {
		w *= 1000
	}
	h.widthUs = w
	h.population, _ = strconv.ParseInt(hm[6], 10, 64)
	var sum int64
	if hm[7] != "" {
		for _, kv := range strings.Split(hm[7], ",") {
			k, v, ok := strings.Cut(kv, ":")
			bin, err1 := strconv.Atoi(k)
			n, err2 := strconv.ParseInt(v, 10, 64)
			if !ok || err1 != nil || err2 != nil || bin < 1 || n < 0 {
				return h, fmt.Errorf("bad histogram bin %q", kv)
			}
			h.counts[bin] += n
			sum += n
			h.maxBin = max(h.maxBin, bin)
		}
	}
	h.obl, _ = strconv.ParseInt(hm[8], 10, 64)
	h.obu, _ = strconv.ParseInt(hm[9], 10, 64)
	if sum+h.obl+h.obu != h.population && sum != h.population {
		return h, fmt.Errorf("histogram bins sum to %d but cnt is %d", sum, h.population)
	}
	return h, nil
}

// ParseIperf2 reads iperf 2's enhanced (-e) text output into a Result
// with Kind "tcp" or "udp" and Tool "iperf". client is the client's output
// (required); server is the server's (`iperf -s -e [-u]`, as StartServer
// runs it), or "" when it is not at hand.
//
// The sender's figures come from the client's final line. The receiver's
// come, for UDP, from the "Server Report" the client prints (jitter, loss,
// one-way latency avg/min/max/stdev, pps) and, for TCP, from the server's
// output only: without it the receiver side of bytes and throughput_bps is
// 0 and a note says it was not measured. With --udp-histogram on the
// server, its final histogram becomes histogram and gives latency
// percentiles (to a bin's width). iperf2 prints transfers and rates rounded
// to three significant figures (use -f b in task_param for exact bytes).
// The parser is strict: a line it does not recognise is an error.
func ParseIperf2(client, server string) (*probe.Result, error) {
	c, err := parseI2(client, "client")
	if err != nil {
		return nil, err
	}
	if c.role != "client" {
		return nil, fmt.Errorf("iperf2 client output: it is a server's output")
	}
	var s *i2Report
	if strings.TrimSpace(server) != "" {
		if s, err = parseI2(server, "server"); err != nil {
			return nil, err
		}
		if s.role != "server" {
			return nil, fmt.Errorf("iperf2 server output: it is a client's output")
		}
		if s.proto != c.proto {
			return nil, fmt.Errorf("iperf2: client ran %s but the server %s", c.proto, s.proto)
		}
	}
	raw := client
	if s != nil {
		raw = client + "\n--- server output ---\n" + server
	}
	r := &probe.Result{Kind: c.proto, Tool: ToolIperf2, Raw: raw, Src: c.local, Dst: c.remote}
	r.Notes = append(r.Notes, c.warnings...)
	if c.tos != nil {
		r.TOS, r.DSCP = *c.tos, *c.tos>>2
	}
	if s != nil && s.tosRx != nil {
		r.DSCPReceived = probe.Int(*s.tosRx >> 2)
		r.DSCPSurvived = probe.Bool(*r.DSCPReceived == r.DSCP)
	}
	if len(c.lines) == 0 {
		return nil, fmt.Errorf("iperf2 client output: no report lines (the test did not run)")
	}
	final := c.lines[len(c.lines)-1]
	r.DurationS = final.end - final.start
	r.Bytes = &probe.SenderReceiver{Sender: final.bytes}
	r.ThroughputBps = &probe.SenderReceiver{Sender: final.bps}
	intervals := c.lines[:len(c.lines)-1]

	switch c.proto {
	case "tcp":
		r.Retransmits = probe.Int64(final.retry)
		if final.haveRTT {
			r.SRTTms = probe.Float(final.rttUs / 1000)
		}
		if s != nil && len(s.lines) > 0 {
			sf := s.lines[len(s.lines)-1]
			r.Bytes.Receiver, r.ThroughputBps.Receiver = sf.bytes, sf.bps
		} else {
			r.Notes = append(r.Notes, "receiver bytes and throughput not measured: iperf2's TCP client reports only the sender; pass the server's output")
		}
	case "udp":
		var recv *i2Line
		switch {
		case len(c.report) > 0:
			recv = &c.report[len(c.report)-1]
		case s != nil && len(s.lines) > 0:
			recv = &s.lines[len(s.lines)-1]
		default:
			return nil, fmt.Errorf("iperf2 udp: no Server Report in the client's output and no server output (the server's report did not arrive)")
		}
		if s != nil && len(s.lines) > 0 {
			intervals = s.lines[:len(s.lines)-1]
			r.Notes = append(r.Notes, "intervals[] are the receiver's")
		}
		r.Bytes.Receiver, r.ThroughputBps.Receiver = recv.bytes, recv.bps
		pc := &probe.PacketCounts{Sent: recv.total, Received: recv.total - recv.lost, Lost: recv.lost}
		if s != nil {
			pc.OutOfOrder = s.outOfOrder
		}
		r.Packets = pc
		if recv.total > 0 {
			r.LossPct = probe.Float(100 * float64(recv.lost) / float64(recv.total))
		}
		r.JitterMs = probe.Float(recv.jitterMs)
		r.PPS = probe.Float(recv.pps)
		if recv.haveLat {
			r.LatencyMs = &probe.Summary{Avg: recv.lat[0], Min: recv.lat[1], Max: recv.lat[2], Stdev: recv.lat[3], Count: pc.Received}
			r.Notes = append(r.Notes, "latency_ms is iperf2's one-way latency (exact only when both ends share a clock, as on one host)")
		}
		if s != nil {
			for i := len(s.hists) - 1; i >= 0; i-- {
				if s.hists[i].final {
					h := s.hists[i]
					r.Histogram = h.toHistogram(s.bins)
					if r.LatencyMs != nil {
						h.percentiles(r.LatencyMs)
						r.Notes = append(r.Notes, "latency_ms percentiles are upper bin edges of iperf2's histogram")
					}
					break
				}
			}
		}
		if r.LatencyMs != nil && r.Histogram == nil {
			r.Notes = append(r.Notes, "latency_ms percentiles not reported: run the server with --udp-histogram")
		}
	}
	for _, l := range intervals {
		in := probe.Interval{StartS: l.start, EndS: l.end, Bytes: l.bytes, ThroughputBps: l.bps}
		if c.proto == "tcp" {
			in.Retransmits = probe.Int64(l.retry)
		}
		if l.total > 0 {
			in.Packets = probe.Int64(l.total - l.lost)
			in.LossPct = probe.Float(100 * float64(l.lost) / float64(l.total))
			in.JitterMs = probe.Float(l.jitterMs)
		}
		r.Intervals = append(r.Intervals, in)
	}
	return r, nil
}

// toHistogram turns iperf2's 1-based bin labels (label k counts values in
// [(k-1)w, kw)) into counts from zero; values beyond the last bin (obu) are
// added to it. bins is the server's configured bin count (0: unknown).
func (h i2Hist) toHistogram(bins int) *probe.Histogram {
	n := max(bins, h.maxBin, 1)
	counts := make([]int64, n)
	for k, v := range h.counts {
		counts[k-1] += v
	}
	counts[0] += h.obl
	counts[n-1] += h.obu
	return &probe.Histogram{BinWidthUs: h.widthUs, Counts: counts}
}

// percentiles fills p50..p99.9 of s (ms) with the upper edge of the bin
// holding each quantile (nearest rank).
func (h i2Hist) percentiles(s *probe.Summary) {
	var total int64
	for _, v := range h.counts {
		total += v
	}
	total += h.obl + h.obu
	if total == 0 {
		return
	}
	at := func(p float64) float64 {
		rank := int64(math.Ceil(p / 100 * float64(total)))
		run := h.obl
		if run >= rank {
			return h.widthUs / 1000
		}
		for k := 1; k <= h.maxBin; k++ {
			run += h.counts[k]
			if run >= rank {
				return float64(k) * h.widthUs / 1000
			}
		}
		return s.Max // beyond the histogram: the largest value seen
	}
	s.P50, s.P90, s.P99, s.P999 = at(50), at(90), at(99), at(99.9)
}

func hasAnyPrefix(s string, ps []string) bool {
	for _, p := range ps {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

func containsAll(s string, subs []string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

func joinHP(h, p string) string {
	if strings.Contains(h, ":") {
		return "[" + h + "]:" + p
	}
	return h + ":" + p
}
