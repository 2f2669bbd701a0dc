package udp

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/udpio"
)

// Pacing constants. The schedule is absolute (datagram i is due at
// start + i × gap), so a late wake-up makes the next batch bigger and never
// lowers the average rate.
const (
	// batchSpan is how much of the schedule one paced batch covers: at
	// rates where more than one datagram falls into it, the sender waits for
	// that many to be due and sends them in one system call.
	batchSpan = 50 * time.Microsecond
	// sleepMin is the shortest gap worth sleeping for; shorter gaps are
	// spun through, yielding the processor.
	sleepMin = 40 * time.Microsecond
	// wakeEarly is how much earlier than due the sender asks to wake, for
	// the wake-up latency that remains with 1 ns timer slack.
	wakeEarly = 15 * time.Microsecond
	// maxSuperPackets bounds the GSO super-packets of one sendmmsg call.
	maxSuperPackets = 8
	// maxSleep bounds one sleep, so cancellation is seen at low rates.
	maxSleep = 50 * time.Millisecond
)

// sendPlan is what one sending side needs.
type sendPlan struct {
	session  probe.SessionID
	size     int
	rateBps  uint64 // 0: as fast as possible
	duration time.Duration
}

// maxBatch returns the most datagrams one Send call carries.
func (p sendPlan) maxBatch() int {
	return min(udpio.SegmentsPerSend(p.size)*maxSuperPackets, 1024)
}

// pacedBatch returns how many datagrams a paced batch waits for.
func (p sendPlan) pacedBatch(gapNs float64) int {
	if p.rateBps == 0 {
		return p.maxBatch()
	}
	n := int(float64(batchSpan.Nanoseconds()) / gapNs)
	return max(1, min(n, udpio.SegmentsPerSend(p.size)))
}

// errRefused is returned when the far end's UDP port is closed.
var errRefused = errors.New("the far end's UDP port refused the datagrams (ICMP port unreachable): is the responder still running?")

// send paces datagrams out through s for p.duration. It must run on its own
// goroutine: it locks its OS thread to sleep with 1 ns timer slack.
func send(ctx context.Context, s *udpio.Sender, p sendPlan) (txReport, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var notes []string
	if err := probe.LowerTimerSlack(); err != nil {
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

	cpu0 := probe.SampleCPU()
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
					wait(at)
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
		CPUPct: probe.CPUPercent(cpu0, probe.SampleCPU()), Mode: s.Mode().String(),
		Notes: append(notes, s.Notes()...)}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return rep, err
}

// wait returns at about t: it sleeps through long gaps (the thread's timer
// slack lowered) and spins, yielding, through short ones.
func wait(t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	if d > sleepMin {
		sl := min(d-wakeEarly, maxSleep)
		ts := unix.NsecToTimespec(sl.Nanoseconds())
		_ = unix.Nanosleep(&ts, nil)
		return
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}
