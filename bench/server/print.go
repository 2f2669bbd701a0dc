package main

import (
	"fmt"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// ms formats a duration in milliseconds with one decimal.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// mb formats bytes in MB.
func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }

// print writes one phase's figures.
func (f figures) print() {
	what := "heartbeat (REST, 1/s)"
	if f.mode == "sessions" {
		what = fmt.Sprintf("keep-alive (every %v)", api.DefaultKeepalive)
	}
	fmt.Printf("agents held (online at the end):     %d of %d (%d offline)\n", f.held, f.agents, f.offline)
	fmt.Printf("%-36s %d answered (%.0f/s), %d errors", what+":", f.hbN, float64(f.hbN)/f.window.Seconds(), f.hbErr)
	if f.mode == "sessions" {
		fmt.Printf(", %d sessions lost\n", f.downs)
	} else {
		fmt.Printf(", %d late ticks\n", f.hbLate)
	}
	fmt.Printf("%-36s p50 %s  p99 %s  p99.9 %s  max %s\n", what+" latency:", ms(f.hb[0]), ms(f.hb[1]), ms(f.hb[2]), ms(f.hb[3]))
	fmt.Printf("start/report latency:                p50 %s  p99 %s  (n=%d)\n", ms(f.other[0]), ms(f.other[1]), f.otherN)
	fmt.Printf("false offline (reaper marks):        %d\n", f.falseOffline)
	if f.mode == "poll" {
		fmt.Printf("long-poll errors:                    %d\n", f.fetchErr)
	}
	fmt.Printf("CPU in window:                       server %.1f%% of a core (%.2f µs per agent per second), simulated agents %.0f%%\n",
		100*f.srvCPU.Seconds()/f.window.Seconds(), float64(f.perAgentS)/1e3, 100*f.benchCPU.Seconds()/f.window.Seconds())
	fmt.Printf("server memory:                       RSS %s (peak %s), %.1f KB per agent\n", mb(f.rss), mb(f.hwm), float64(f.rss)/1e3/float64(max(f.agents, 1)))
	fmt.Printf("dispatch latency (create → agent):   p50 %s  p90 %s  p99 %s  max %s  (n=%d, %d never arrived)\n", ms(f.disp[0]), ms(f.disp[1]), ms(f.disp[2]), ms(f.disp[3]), f.dispN, f.lost)
	fmt.Printf("machine load average at the end:     %s\n", f.load)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// printSummary writes the targets of #12 for each mode side by side.
func printSummary(c config, phases []figures, hold *figures, asked int) {
	if len(phases) == 0 {
		fmt.Printf("\n== targets (#12)\n")
		return
	}
	fmt.Printf("\n== targets (#12), %d agents; each column its own run of %v\n", c.agents, c.measure)
	fmt.Printf("%-40s", "")
	for _, f := range phases {
		fmt.Printf(" %-28s", f.mode)
	}
	fmt.Println()
	row := func(name string, cell func(f figures) (string, bool)) {
		fmt.Printf("%-40s", name)
		for _, f := range phases {
			v, ok := cell(f)
			fmt.Printf(" %-28s", v+" "+verdict(ok))
		}
		fmt.Println()
	}
	row("agents held", func(f figures) (string, bool) {
		return fmt.Sprintf("%d/%d", f.held, f.agents), f.held == f.agents
	})
	row("keep-alive (poll: heartbeat) p99 <100ms", func(f figures) (string, bool) { return ms(f.hb[1]), f.hbN > 0 && f.hb[1] < 100*time.Millisecond })
	row("false offline = 0", func(f figures) (string, bool) { return fmt.Sprint(f.falseOffline), f.falseOffline == 0 })
	row("dispatch p50 < 10 ms", func(f figures) (string, bool) { return ms(f.disp[0]), f.dispN > 0 && f.disp[0] < 10*time.Millisecond })
	row("dispatch p99 < 100 ms", func(f figures) (string, bool) {
		return ms(f.disp[2]), f.dispN > 0 && f.lost == 0 && f.disp[2] < 100*time.Millisecond
	})
	row("server CPU per agent per second <= 15µs", func(f figures) (string, bool) {
		return fmt.Sprintf("%.2f µs", float64(f.perAgentS)/1e3), f.perAgentS > 0 && f.perAgentS <= 15*time.Microsecond
	})
	for _, f := range phases {
		fmt.Printf("load average at the end of %-9s %s\n", f.mode+":", f.load)
	}
	if hold != nil && hold.agents < asked {
		fmt.Printf("%d agents held: NOT MEASURED (MISSED): the open-file limit caps a process at %d connections; at the figure below, %d agents would need a server RSS of about %s\n",
			asked, hold.agents, asked, mb(hold.rss/int64(hold.agents)*int64(asked)))
	}
	if hold != nil {
		fmt.Printf("%d agents held on sessions: %d/%d online, %d false offline, keep-alive p99 %s; server RSS %s (peak %s, %.1f KB per agent), %.2f µs CPU per agent per second; load %s: %s\n",
			hold.agents, hold.held, hold.agents, hold.falseOffline, ms(hold.hb[1]), mb(hold.rss), mb(hold.hwm),
			float64(hold.rss)/1e3/float64(hold.agents), float64(hold.perAgentS)/1e3, hold.load,
			verdict(hold.held == hold.agents && hold.falseOffline == 0))
	}
}
