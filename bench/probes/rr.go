package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// rrRun is one rr run of either tool.
type rrRun struct {
	p50us, tps float64
	w          watchResult
}

// cpuPerTx is the client's and the server's CPU time per transaction in
// µs, NaN when the window was not measured. The transactions in the
// window are the run's rate (cnperf's transactions_per_s, sockperf's
// valid-period rate) times the window's length.
func (r rrRun) cpuPerTx() (client, server float64) {
	if r.w.err != nil || r.tps <= 0 || r.w.window <= 0 {
		return math.NaN(), math.NaN()
	}
	return r.w.cpuPerTx(r.w.clientNs, r.tps), r.w.cpuPerTx(r.w.serverNs, r.tps)
}

// describe is the run's CPU as printed after its figures.
func (r rrRun) describe(serverName string) string {
	if r.w.err != nil {
		return "CPU not measured: " + r.w.err.Error()
	}
	c, s := r.cpuPerTx()
	out := fmt.Sprintf("CPU per transaction: client %.1f µs, %s %.1f µs; same CPU %s (%s; by tenths %s) (window %.2f s, %d periods; sampler %.1f %% of a CPU)",
		c, serverName, s, fmtPct(r.w.samePct()), r.placement(), timeline(r.w.sameMarks), r.w.window.Seconds(), r.w.periods, 100*float64(r.w.samplerNs)/float64(r.w.samplerWall.Nanoseconds()))
	if r.w.warn != "" {
		out += "; cross-check:" + strings.TrimSuffix(r.w.warn, ";")
	}
	return out
}

// rr compares 64-byte request/response, back to back: app p50,
// transactions per second, and the CPU per transaction of client and
// server.
func (b *bench) rr(tcp bool) ([]row, error) {
	proto := "udp"
	if tcp {
		proto = "tcp"
	}
	var cn, sp []rrRun
	var cnCPU []float64
	for i := 0; i < b.o.runs; i++ {
		c, w, err := b.cnperfWatched(b.o.rrTime+30*time.Second, b.cnperfServer, "rr", "--proto", proto, "--to", b.cnperfTarget(), "-t", b.o.rrTime.String(), "-l", "64")
		if err != nil {
			return nil, err
		}
		cn = append(cn, rrRun{p50us: c.AppRTTms.P50 * 1e3, tps: c.TPS, w: w})
		cnCPU = append(cnCPU, c.CPUPct.Sender)
		s, w, err := b.sockperf(tcp)
		if err != nil {
			return nil, err
		}
		sp = append(sp, rrRun{p50us: s.p50us, tps: s.tps, w: w})
		fmt.Printf("  rr %s run %d cnperf:   app p50 %.1f µs, %.0f/s, cpu_pct %.0f %%; %s\n",
			proto, i+1, cn[i].p50us, cn[i].tps, cnCPU[i], cn[i].describe("responder"))
		fmt.Printf("  rr %s run %d sockperf: p50 %.1f µs, %.0f/s; %s\n",
			proto, i+1, sp[i].p50us, sp[i].tps, sp[i].describe("server"))
	}
	get := func(runs []rrRun, f func(rrRun) float64) []float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return v
	}
	p50 := func(r rrRun) float64 { return r.p50us }
	tps := func(r rrRun) float64 { return r.tps }
	clientCPU := func(r rrRun) float64 { c, _ := r.cpuPerTx(); return c }
	serverCPU := func(r rrRun) float64 { _, s := r.cpuPerTx(); return s }
	p50Ratio := median(get(cn, p50)) / median(get(sp, p50))
	tpsRatio := median(get(cn, tps)) / median(get(sp, tps))
	name := "rr " + map[bool]string{false: "UDP", true: "TCP"}[tcp] + " 64 B"
	rows := []row{
		{mode: b.mode.short, test: name + ", app RTT p50", cnperf: fmt.Sprintf("%.1f µs", median(get(cn, p50))),
			ref: fmt.Sprintf("sockperf %.1f µs", median(get(sp, p50))), ratio: p50Ratio, target: "≤ 1.0", met: p50Ratio <= 1.0,
			notes: []string{fmt.Sprintf("cnperf client cpu_pct %.0f %%", median(cnCPU)),
				fmt.Sprintf("same CPU per run: cnperf %s; sockperf %s", placementSummary(cn), placementSummary(sp))}},
		{mode: b.mode.short, test: name + ", transactions/s", cnperf: fmt.Sprintf("%.1fk", median(get(cn, tps))/1e3),
			ref: fmt.Sprintf("sockperf %.1fk", median(get(sp, tps))/1e3), ratio: tpsRatio, target: "≥ 1.0", met: tpsRatio >= 1.0},
		cpuRow(b.mode.short, name+", client CPU per transaction", "sockperf", get(cn, clientCPU), get(sp, clientCPU)),
		cpuRow(b.mode.short, name+", responder CPU per transaction", "sockperf server", get(cn, serverCPU), get(sp, serverCPU)),
	}
	// Report only: the verdicts stay the medians' ratios.
	for i, f := range []func(rrRun) float64{p50, tps, clientCPU, serverCPU} {
		if line := placementsDiffer(cn, sp, f); line != "" {
			rows[i].notes = append(rows[i].notes, line)
		}
	}
	return rows, nil
}

// cpuRow compares the medians of the measured runs' CPU per transaction
// (NaN: not measured); a row whose either side has no measured run reads
// "not measured" and MISSED.
func cpuRow(mode, test, refName string, cn, ref []float64) row {
	mc, nc := medianMeasured(cn)
	mr, nr := medianMeasured(ref)
	r := row{mode: mode, test: test, target: "≤ 1.0", cnperf: fmtCPU(mc, nc, len(cn)), ref: refName + " " + fmtCPU(mr, nr, len(ref))}
	r.ratio = mc / mr
	r.met = nc > 0 && nr > 0 && r.ratio <= 1.0
	return r
}

func fmtCPU(m float64, n, of int) string {
	switch {
	case n == 0:
		return "not measured"
	case n < of:
		return fmt.Sprintf("%.1f µs (%d of %d runs)", m, n, of)
	}
	return fmt.Sprintf("%.1f µs", m)
}

// medianMeasured is the median of v's values that are not NaN, and how
// many there were.
func medianMeasured(v []float64) (float64, int) {
	var m []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			m = append(m, x)
		}
	}
	return median(m), len(m)
}
