package probe

import (
	"time"

	"golang.org/x/sys/unix"
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
