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

// CPUUse is one side's CPU use over a test, in percent of one CPU: the
// process's user and system time over the wall time (iperf3's
// cpu_util_user and cpu_util_system); Pct is their sum.
type CPUUse struct {
	Pct, UserPct, SystemPct float64
}

// CPUUseBetween returns the CPU used between from and to, split into user
// and system time.
func CPUUseBetween(from, to CPUSample) CPUUse {
	wall := to.Wall.Sub(from.Wall)
	if wall <= 0 {
		return CPUUse{}
	}
	u := CPUUse{UserPct: 100 * float64(to.User-from.User) / float64(wall), SystemPct: 100 * float64(to.Sys-from.Sys) / float64(wall)}
	u.Pct = u.UserPct + u.SystemPct
	return u
}

// SetCPU fills r's cpu_pct and, when both sides' split is known, its
// cpu_user_pct and cpu_system_pct, from the sender's and the receiver's
// CPU use. A side's split is nil when its peer did not report one (an
// older responder).
func (r *Result) SetCPU(sender, receiver float64, senderSplit, receiverSplit *CPUUse) {
	r.CPUPct = &SenderReceiver{Sender: sender, Receiver: receiver}
	if senderSplit == nil || receiverSplit == nil {
		return
	}
	r.CPUUserPct = &SenderReceiver{Sender: senderSplit.UserPct, Receiver: receiverSplit.UserPct}
	r.CPUSystemPct = &SenderReceiver{Sender: senderSplit.SystemPct, Receiver: receiverSplit.SystemPct}
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
