package engine

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
)

// CPUSample is the process's CPU time at one instant.
type CPUSample struct {
	Wall time.Time
	User time.Duration
	Sys  time.Duration
}

// SampleCPU reads the whole process's user and system time (getrusage
// RUSAGE_SELF), as iperf3 does for its cpu_utilization_percent.
func SampleCPU() CPUSample {
	var ru unix.Rusage
	s := CPUSample{Wall: time.Now()}
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err == nil {
		s.User = time.Duration(ru.Utime.Nano())
		s.Sys = time.Duration(ru.Stime.Nano())
	}
	return s
}

// CPUUseBetween returns the CPU used between from and to, split into user
// and system time.
func CPUUseBetween(from, to CPUSample) probe.CPUUse {
	wall := to.Wall.Sub(from.Wall)
	if wall <= 0 {
		return probe.CPUUse{}
	}
	u := probe.CPUUse{UserPct: 100 * float64(to.User-from.User) / float64(wall), SystemPct: 100 * float64(to.Sys-from.Sys) / float64(wall)}
	u.Pct = u.UserPct + u.SystemPct
	return u
}

// CPUPercent returns (user+sys) CPU time spent between from and to, over
// the wall time between them, in percent. On several cores it can exceed
// 100, as iperf3's figure can.
func CPUPercent(from, to CPUSample) float64 {
	wall := to.Wall.Sub(from.Wall)
	if wall <= 0 {
		return 0
	}
	used := (to.User - from.User) + (to.Sys - from.Sys)
	return 100 * float64(used) / float64(wall)
}
