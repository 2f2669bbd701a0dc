package main

import (
	"fmt"
	"time"
)

// ms formats a duration in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// outcome is what run measured besides the recorders in bench.
type outcome struct {
	held, offline    int // agents listed online and offline at the end
	falseOffline     int // reaper marks during the window
	window           time.Duration
	srvPid           int           // 0: an outside server (no CPU figure)
	srvCPU, benchCPU time.Duration // CPU used in the window
	load             []byte        // /proc/loadavg at the end
}

// print writes the figures and the verdict on each target.
func (b *bench) print(o outcome) {
	c := b.c
	n, p := b.hbLat.pct(50, 99, 99.9, 100)
	on, op := b.otherLat.pct(50, 99)
	dn, dp := b.dispatch.pct(50, 90, 99, 100)
	b.mu.Lock()
	lost := len(b.created)
	b.mu.Unlock()
	rate := float64(n) / o.window.Seconds()
	fmt.Println()
	fmt.Printf("agents held (online at the end):     %d of %d (%d offline)\n", o.held, c.agents, o.offline)
	fmt.Printf("heartbeats in window:                %d answered (%.0f/s), %d errors, %d late ticks\n", n, rate, b.hbErr.Load(), b.hbLate.Load())
	fmt.Printf("heartbeat latency:                   p50 %s  p99 %s  p99.9 %s  max %s\n", ms(p[0]), ms(p[1]), ms(p[2]), ms(p[3]))
	fmt.Printf("start/report latency:                p50 %s  p99 %s  (n=%d)\n", ms(op[0]), ms(op[1]), on)
	fmt.Printf("false offline (reaper marks):        %d\n", o.falseOffline)
	fmt.Printf("long-poll errors:                    %d\n", b.fetchErr.Load())
	if o.srvPid != 0 {
		perBeat := time.Duration(0)
		if n > 0 {
			perBeat = o.srvCPU / time.Duration(n)
		}
		fmt.Printf("CPU in window:                       server %.0f%% of a core (%v per answered heartbeat, all its work included), simulated agents %.0f%%\n",
			100*o.srvCPU.Seconds()/o.window.Seconds(), perBeat.Round(time.Microsecond), 100*o.benchCPU.Seconds()/o.window.Seconds())
	}
	fmt.Printf("machine load average at the end:     %s", o.load)
	fmt.Printf("dispatch latency (create → agent):   p50 %s  p90 %s  p99 %s  max %s  (n=%d, %d never arrived)\n", ms(dp[0]), ms(dp[1]), ms(dp[2]), ms(dp[3]), dn, lost)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Printf("targets: %d agents held %s; heartbeat p99 < 100 ms %s; no false offline %s; dispatch p50 < 50 ms %s\n",
		c.agents, verdict(o.held == c.agents), verdict(p[1] < 100*time.Millisecond), verdict(o.falseOffline == 0), verdict(dn > 0 && dp[0] < 50*time.Millisecond))
}
