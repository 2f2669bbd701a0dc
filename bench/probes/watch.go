package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// An rr run's client and server are sampled from /proc every watchPeriod
// while the run goes (procstat.go says what is read). The samples find
// where the transaction loop starts, and a window in its middle gives the
// CPU each end spends in it.
//
// Where the loop starts: sockperf ping-pong sleeps ~2.1 s after it starts
// (connects, then waits before its warm-up) and cnperf starts its loop
// within milliseconds, so the process start is no clock for both. The loop
// is taken to start at the first of loopStreak consecutive sample periods
// in which both processes gained at least busyShare of the period in CPU
// time: a connect or a Go runtime's idle wake-ups do not last that long,
// a back-to-back request/response loop does from its first transaction.
const (
	watchPeriod = 10 * time.Millisecond
	loopStreak  = 5
	busyShare   = 0.10
	// The window runs from windowLead after the loop's start to windowTail
	// before its expected end: past sockperf's warm-up (400 ms, left out
	// of its figures) and before its last 50 ms (left out too) and
	// cnperf's loop end.
	windowLead = 500 * time.Millisecond
	windowTail = 300 * time.Millisecond
)

// watchSpec names the two processes of one rr run.
type watchSpec struct {
	client, server         int    // PIDs
	clientComm, serverComm string // the tool's comm, checked once the loop runs
	rrTime                 time.Duration
}

// watchResult is what the samples of one run measured. err says why the
// window was not measured (then the rest is zero).
type watchResult struct {
	err                error
	window             time.Duration // between the window's first and last samples
	clientNs, serverNs uint64        // CPU time in the window, schedstat summed over threads
	warn               string        // the /proc/PID/stat cross-check disagreed
	periods, same      int           // sample periods in the window in which both ends ran; of them, on one CPU
	sameMarks          []bool        // per such period in order: on one CPU
	samplerNs          uint64        // the sampling thread's own CPU over the whole run
	samplerWall        time.Duration
}

// cpuPerTx is the CPU time per transaction in µs of ns spent in the
// window at rate transactions a second.
func (r watchResult) cpuPerTx(ns uint64, rate float64) float64 {
	return float64(ns) / 1e3 / (rate * r.window.Seconds())
}

// watch samples spec's processes until the window closes or ctx ends (the
// client exited). It runs on a locked thread so that its own CPU can be
// read (RUSAGE_THREAD) and reported beside the figures: it shares the two
// CPUs with what it measures.
func watch(ctx context.Context, spec watchSpec) watchResult {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, self0 := time.Now(), threadCPU()
	r := watchLoop(ctx, spec)
	r.samplerNs, r.samplerWall = threadCPU()-self0, time.Since(t0)
	return r
}

func threadCPU() uint64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_THREAD, &ru) != nil {
		return 0
	}
	return uint64(ru.Utime.Nano() + ru.Stime.Nano())
}

// procPair is one sample of both processes: each thread's run time.
type procPair struct {
	at             time.Time
	client, server map[int]uint64
}

// pairReader samples both processes.
type pairReader struct{ client, server *taskReader }

func (p pairReader) sample() (procPair, error) {
	at := time.Now()
	c, err := p.client.read()
	if err != nil {
		return procPair{}, fmt.Errorf("client: %w", err)
	}
	s, err := p.server.read()
	if err != nil {
		return procPair{}, fmt.Errorf("server: %w", err)
	}
	return procPair{at: at, client: c, server: s}, nil
}

func watchLoop(ctx context.Context, spec watchSpec) watchResult {
	tick := time.NewTicker(watchPeriod)
	defer tick.Stop()
	rd := pairReader{client: newTaskReader(spec.client), server: newTaskReader(spec.server)}
	defer rd.client.close()
	defer rd.server.close()
	prev, err := rd.sample()
	if err != nil {
		return watchResult{err: err}
	}
	var (
		loop     loopDetector
		base     *procPair // the window's first sample
		baseTick [2]uint64
		winStart time.Time
		winEnd   time.Time
		r        watchResult
	)
	for {
		select {
		case <-ctx.Done():
			if base == nil {
				return watchResult{err: fmt.Errorf("the run ended before its loop's window (loop found: %v)", !loop.start.IsZero())}
			}
			return watchResult{err: fmt.Errorf("the run ended %v into its loop's window, before its end", prev.at.Sub(base.at).Round(time.Millisecond))}
		case <-tick.C:
		}
		cur, err := rd.sample()
		if err != nil {
			return watchResult{err: err}
		}
		cGain, cBusiest := step(prev.client, cur.client)
		sGain, sBusiest := step(prev.server, cur.server)
		switch {
		case loop.start.IsZero():
			if loop.feed(prev.at, cur.at, cGain, sGain) {
				winStart = loop.start.Add(windowLead)
				winEnd = loop.start.Add(spec.rrTime - windowTail)
				if !winEnd.After(winStart) {
					return watchResult{err: fmt.Errorf("rr time %v leaves no window (%v after the loop starts to %v before its end)", spec.rrTime, windowLead, windowTail)}
				}
			}
		case base == nil:
			if !cur.at.Before(winStart) {
				if err := checkComms(spec); err != nil {
					return watchResult{err: err}
				}
				if baseTick, err = groupTicks(spec); err != nil {
					return watchResult{err: err}
				}
				b := cur
				base = &b
				rd.client.listRarely()
				rd.server.listRarely()
			}
		default:
			r.clientNs += cGain
			r.serverNs += sGain
			if cBusiest != 0 && sBusiest != 0 {
				cc, err1 := rd.client.cpuOf(cBusiest)
				sc, err2 := rd.server.cpuOf(sBusiest)
				if err1 == nil && err2 == nil { // else a busiest thread just exited
					r.periods++
					if cc == sc {
						r.same++
					}
					r.sameMarks = append(r.sameMarks, cc == sc)
				}
			}
			if !cur.at.Before(winEnd) {
				endTick, err := groupTicks(spec)
				if err != nil {
					return watchResult{err: err}
				}
				r.window = cur.at.Sub(base.at)
				r.warn = crossCheck("client", r.clientNs, endTick[0]-baseTick[0]) + crossCheck("server", r.serverNs, endTick[1]-baseTick[1])
				return r
			}
		}
		prev = cur
	}
}

// step compares two samples of one process: the CPU time its threads
// gained between them (a thread new since prev, or whose run time went
// back because its id was reused, counts from zero), and the thread that
// gained most (0 when none gained; ties go to the lower thread id).
func step(prev, cur map[int]uint64) (gainedNs uint64, busiest int) {
	var most uint64
	for tid, c := range cur {
		g := c
		if p, ok := prev[tid]; ok && p <= c {
			g = c - p
		}
		gainedNs += g
		if g > 0 && (g > most || g == most && tid < busiest) {
			most, busiest = g, tid
		}
	}
	return gainedNs, busiest
}

// loopDetector finds the start of a transaction loop: the first of
// loopStreak consecutive periods in which client and server each gained at
// least busyShare of the period in CPU time.
type loopDetector struct {
	streak      int
	streakStart time.Time
	start       time.Time // zero until found
}

// feed takes the period from..to and the CPU each end gained in it, and
// says whether the loop's start has just been found.
func (d *loopDetector) feed(from, to time.Time, clientNs, serverNs uint64) bool {
	need := uint64(busyShare * float64(to.Sub(from)))
	if clientNs < need || serverNs < need || need == 0 {
		d.streak = 0
		return false
	}
	if d.streak == 0 {
		d.streakStart = from
	}
	d.streak++
	if d.streak < loopStreak {
		return false
	}
	d.start = d.streakStart
	return true
}

// checkComms makes sure the PIDs are the tools': in pinned modes the bench
// starts `taskset -c N tool`, and taskset executes the tool in place
// (same PID); this would catch it if it ever forked instead.
func checkComms(spec watchSpec) error {
	for _, p := range []struct {
		pid  int
		want string
	}{{spec.client, spec.clientComm}, {spec.server, spec.serverComm}} {
		got, err := readComm(p.pid)
		if err != nil {
			return fmt.Errorf("comm of %d: %w", p.pid, err)
		}
		if got != p.want {
			return fmt.Errorf("process %d is %q, not %q: the PID sampled is not the tool's", p.pid, got, p.want)
		}
	}
	return nil
}

func groupTicks(spec watchSpec) ([2]uint64, error) {
	c, err := readGroupTicks(spec.client)
	if err != nil {
		return [2]uint64{}, fmt.Errorf("client stat: %w", err)
	}
	s, err := readGroupTicks(spec.server)
	if err != nil {
		return [2]uint64{}, fmt.Errorf("server stat: %w", err)
	}
	return [2]uint64{c, s}, nil
}

// userHZ is stat's clock tick rate, read once (clockTicks).
var userHZ = func() uint64 {
	hz, err := clockTicks()
	if err != nil || hz == 0 {
		return 0 // crossCheck then says it cannot check
	}
	return hz
}()

// crossCheck compares the schedstat sum with the thread group's utime +
// stime over the same window. They differ by the tick rounding (each of
// utime and stime is rounded at each end: up to 4 ticks) and by the
// running thread's current slice, which stat counts and schedstat not
// yet; more than that means threads the sampling missed (exited between
// two samples) or a misread. Returns "" when they agree.
func crossCheck(who string, ns, ticks uint64) string {
	if userHZ == 0 {
		return fmt.Sprintf(" %s: clock tick rate unknown, no cross-check;", who)
	}
	tickNs := 1e9 / float64(userHZ)
	statNs := float64(ticks) * tickNs
	if d := statNs - float64(ns); d > 5*tickNs+0.05*float64(ns) || -d > 5*tickNs+0.05*float64(ns) {
		return fmt.Sprintf(" %s CPU by schedstat %.0f ms, by stat %.0f ms;", who, float64(ns)/1e6, statNs/1e6)
	}
	return ""
}
