package main

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// runMode starts the servers of this mode and runs every comparison.
func (b *bench) runMode() ([]row, error) {
	if err := b.startServers(); err != nil {
		return nil, err
	}
	var rows []row
	if b.mode.runs("tcp", b.o.only) {
		for _, streams := range []int{1, b.o.streams} {
			r, err := b.tcp(streams)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
	}
	if b.mode.runs("udp", b.o.only) {
		for _, rate := range []float64{10e6, 100e6, 1e9} {
			r, err := b.udp(rate)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
	}
	if b.mode.runs("rr", b.o.only) {
		for _, tcp := range []bool{false, true} {
			r, err := b.rr(tcp)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
	}
	return rows, nil
}

// tcp compares receiver throughput with streams parallel streams.
func (b *bench) tcp(streams int) (row, error) {
	var cn, ip []float64
	how := ""
	secs := strconv.Itoa(max(1, int(b.o.tcpTime.Seconds())))
	for i := 0; i < b.o.runs; i++ {
		c, err := b.cnperf(b.o.tcpTime+30*time.Second, "tcp", "--to", b.cnperfTarget(), "-t", b.o.tcpTime.String(), "-P", strconv.Itoa(streams))
		if err != nil {
			return row{}, err
		}
		cn = append(cn, c.ThroughputBps.Receiver)
		how = c.RecvMethod
		r, err := b.iperf3(b.o.tcpTime+30*time.Second, "-t", secs, "-P", strconv.Itoa(streams))
		if err != nil {
			return row{}, err
		}
		ip = append(ip, r.End.SumReceived.BitsPerSecond)
		fmt.Printf("  tcp -P %d run %d: cnperf %.2f Gbit/s, iperf3 %.2f Gbit/s\n", streams, i+1, cn[i]/1e9, ip[i]/1e9)
	}
	ratio := median(cn) / median(ip)
	name := "TCP 1 stream, receiver"
	if streams > 1 {
		name = fmt.Sprintf("TCP -P %d, receiver", streams)
	}
	var notes []string
	if how != "" {
		notes = []string{"cnperf receiver: " + how}
	}
	return row{mode: b.mode.short, test: name, cnperf: fmt.Sprintf("%.2f Gbit/s", median(cn)/1e9),
		ref: fmt.Sprintf("iperf3 %.2f Gbit/s", median(ip)/1e9), ratio: ratio, target: "≥ 1.0", met: ratio >= 1.0, notes: notes}, nil
}

// udp compares the sender's CPU at a paced rate with 1400-byte payloads.
func (b *bench) udp(rate float64) (row, error) {
	var cnCPU, ipCPU, cnLoss, ipLoss, cnRate, ipRate []float64
	burst := 0
	mode := ""
	rs := strconv.FormatFloat(rate, 'f', 0, 64)
	for i := 0; i < b.o.runs; i++ {
		c, err := b.cnperf(b.o.udpTime+30*time.Second, "udp", "--to", b.cnperfTarget(), "-t", b.o.udpTime.String(), "-l", "1400", "-b", rs)
		if err != nil {
			return row{}, err
		}
		if c.LossPct == nil {
			return row{}, fmt.Errorf("cnperf udp result has no loss_pct")
		}
		cnCPU, cnLoss, cnRate = append(cnCPU, c.CPUPct.Sender), append(cnLoss, *c.LossPct), append(cnRate, c.ThroughputBps.Receiver)
		burst, mode = max(burst, c.BurstDatagrams), c.SendMode
		r, err := b.iperf3(b.o.udpTime+30*time.Second, "-u", "-l", "1400", "-b", rs, "-t", strconv.Itoa(max(1, int(math.Ceil(b.o.udpTime.Seconds())))))
		if err != nil {
			return row{}, err
		}
		ipCPU, ipLoss, ipRate = append(ipCPU, r.End.CPU.HostTotal), append(ipLoss, r.End.Sum.LostPercent), append(ipRate, r.End.Sum.BitsPerSecond)
		fmt.Printf("  udp %s run %d: sender cpu cnperf %.1f %% (loss %.3g %%, burst %d, %s), iperf3 %.1f %% (loss %.3g %%)\n",
			rateName(rate), i+1, cnCPU[i], cnLoss[i], c.BurstDatagrams, c.SendMode, ipCPU[i], ipLoss[i])
	}
	ratio := median(cnCPU) / median(ipCPU)
	met := ratio <= 1.0 && median(cnLoss) < 0.1
	target := "≤ 1.0, loss < 0.1 %"
	if rate == 100e6 {
		met = met && burst <= 9
		target += ", burst ≤ 9"
	}
	return row{mode: b.mode.short, test: fmt.Sprintf("UDP 1400 B at %s, sender CPU", rateName(rate)),
		cnperf: fmt.Sprintf("%.1f %%", median(cnCPU)), ref: fmt.Sprintf("iperf3 %.1f %%", median(ipCPU)),
		ratio: ratio, target: target, met: met,
		notes: []string{fmt.Sprintf("loss cnperf %.3g %% / iperf3 %.3g %%, rate cnperf received %.0f / iperf3 end.sum %.0f Mbit/s; cnperf send_mode %s, burst_datagrams ≤ %d",
			median(cnLoss), median(ipLoss), median(cnRate)/1e6, median(ipRate)/1e6, mode, burst)}}, nil
}

func rateName(r float64) string {
	switch {
	case r >= 1e9:
		return fmt.Sprintf("%gG", r/1e9)
	case r >= 1e6:
		return fmt.Sprintf("%gM", r/1e6)
	}
	return fmt.Sprintf("%g", r)
}
