package udp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// Pacing constants. The schedule is absolute (datagram i is due at
// start + i × gap), so a late wake-up makes the next batch bigger and never
// lowers the average rate.
const (
	// paceQuantum is how much of the schedule one paced batch covers: the
	// sender sleeps until that many datagrams are due and hands them to the
	// kernel in one system call. 1 ms is iperf3's default pacing timer, so
	// the schedule is as smooth as iperf3's (at 100 Mbit/s and 1400 bytes,
	// 8 datagrams a batch) at a thousand wake-ups a second at most. Waking
	// once per datagram instead cost 4× iperf3's CPU at 100 Mbit/s.
	paceQuantum = time.Millisecond
	// maxSuperPackets bounds the GSO super-packets of one sendmmsg call.
	maxSuperPackets = 8
	// maxSleep bounds one sleep, so cancellation is seen at low rates.
	maxSleep = 50 * time.Millisecond
	// rawSleepMax is the longest sleep made as a raw system call, holding
	// the thread's P (see sleepUntil): short enough that the runtime's
	// other work is not held up.
	rawSleepMax = 5 * time.Millisecond
)

// sendPlan is what one sending side needs.
type sendPlan struct {
	session  engine.SessionID
	size     int
	rateBps  uint64 // 0: as fast as possible
	duration time.Duration
}

// maxBatch returns the most datagrams one Send call carries.
func (p sendPlan) maxBatch() int {
	return min(udpio.SegmentsPerSend(p.size)*maxSuperPackets, 1024)
}

// pacedBatch returns how many datagrams a paced batch carries: those due
// within paceQuantum (at least one), at most maxBatch.
func (p sendPlan) pacedBatch(gapNs float64) int {
	if p.rateBps == 0 {
		return p.maxBatch()
	}
	n := int(float64(paceQuantum.Nanoseconds()) / gapNs)
	return max(1, min(n, p.maxBatch()))
}

// errRefused is returned when the far end's UDP port is closed.
var errRefused = errors.New("the far end's UDP port refused the datagrams (ICMP port unreachable): is the responder still running?")

// send paces datagrams out through s for p.duration. It must run on its own
// goroutine: it locks its OS thread to sleep with 1 ns timer slack.
func send(ctx context.Context, s *udpio.Sender, p sendPlan) (txReport, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var notes []string
	if err := engine.LowerTimerSlack(); err != nil {
		notes = append(notes, fmt.Sprintf("sender: %v; short sleeps may overshoot", err))
	}
	batch := p.maxBatch()
	buf := make([]byte, batch*p.size)
	for i := 0; i < batch; i++ {
		Packet{Session: p.session}.Put(buf[i*p.size:])
	}
	var gapNs float64 // ns between datagrams; 0 = unpaced
	if p.rateBps > 0 {
		gapNs = float64(p.size) * 8 * 1e9 / float64(p.rateBps)
	}
	want := p.pacedBatch(gapNs)
	batch = want // a late wake-up sends what is due in batches of want

	cpu0 := engine.SampleCPU()
	start := time.Now()
	end := start.Add(p.duration)
	var sent int64
	var err error
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) {
			break
		}
		elapsed := float64(now.Sub(start).Nanoseconds())
		n := int64(batch)
		if gapNs > 0 {
			due := int64(elapsed/gapNs) + 1 // datagrams 0..due-1 are due
			n = min(due-sent, int64(batch))
			if n < int64(want) {
				// Wait until the batch's last datagram is due.
				at := start.Add(time.Duration(float64(sent+int64(want)-1) * gapNs))
				if at.After(end) {
					at = end
				}
				if n <= 0 || time.Until(at) > 0 {
					sleepUntil(at)
					continue
				}
			}
		}
		ts := now.UnixNano()
		for i := int64(0); i < n; i++ {
			putSeqTime(buf[int(i)*p.size:], uint64(sent+i), ts)
		}
		k, serr := s.Send(buf, p.size, int(n))
		sent += int64(k)
		if serr != nil {
			if udpio.IsRefused(serr) {
				err = errRefused
			} else {
				err = fmt.Errorf("send datagrams: %w", serr)
			}
			break
		}
	}
	stop := time.Now()
	rep := txReport{Sent: sent, Bytes: sent * int64(p.size), DurationNs: stop.Sub(start).Nanoseconds(),
		Mode:  s.Mode().String(),
		Burst: s.MaxBurst(), Notes: append(notes, s.Notes()...)}
	use := engine.CPUUseBetween(cpu0, engine.SampleCPU())
	rep.CPUPct = use.Pct
	rep.CPUUserPct, rep.CPUSystemPct = cpuSplit(use)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return rep, err
}

// sleepUntil sleeps until about t on the calling (locked) thread, whose
// timer slack is lowered, in one nanosleep: no spinning, since the
// schedule is absolute and a few microseconds late only make the batch
// leave a little later. Go's own timers would round a sub-millisecond
// sleep up to the poller's millisecond.
func sleepUntil(t time.Time) {
	d := min(time.Until(t), maxSleep)
	if d <= 0 {
		return
	}
	ts := unix.NsecToTimespec(d.Nanoseconds())
	if d <= rawSleepMax {
		// A raw system call: Go's runtime does not see this thread enter
		// a syscall, so its monitor does not take the P away during the
		// sleep, and the thread need not wait on a futex for a P when it
		// wakes: measured, that dance cost three context switches per
		// wake-up and most of the sender's CPU at 10 and 100 Mbit/s. A
		// signal (the runtime's preemption included) ends the sleep
		// early; the loop then simply sleeps again.
		_, _, _ = unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
		return
	}
	_ = unix.Nanosleep(&ts, nil)
}
