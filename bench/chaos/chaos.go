package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The kinds of chaos event.
const (
	evAgentKill  = "agent SIGKILLed, restarted"
	evPartition  = "agent partitioned"
	evServerKill = "server SIGKILLed, restarted"
	evDiskFull   = "store's disk filled"
)

// figures is what the run counts; bench.mu guards it.
type figures struct {
	started, chaosEnded time.Time
	events              map[string]int
	skipped             int // events with nothing free to act on
	agentDown           []time.Duration
	partitions          []time.Duration
	serverDown          []time.Duration
	recoverReady        []time.Duration // server restart → /readyz 200
	recoverSessions     []time.Duration // server restart → every untouched agent's session open again
	recoverMissed       int             // restarts after which some agent had not reopened within the limit
	serverStartFailures int
	diskFull            []time.Duration
	diskFilledMiB       []float64

	runsCreated, tasksCreated int
	create503, createOther    int // create requests refused 503, or failed otherwise, then retried
}

func (f *figures) eventCount() int {
	n := 0
	for _, v := range f.events {
		n += v
	}
	return n
}

// eventNames are the -events names of the kinds.
var eventNames = map[string]string{
	"agent-kill":  evAgentKill,
	"partition":   evPartition,
	"server-kill": evServerKill,
	"disk-full":   evDiskFull,
}

// chaos starts an event every ~chaosEvery until ctx ends: the first are
// one of each kind of -events (in a random order), then agent kills and
// partitions twice as often as server kills and disk fills. Each event
// runs its full length in runCtx (the bench's), so the last partitions
// are not cut short when the chaos stops.
func (b *bench) chaos(ctx, runCtx context.Context, wg *sync.WaitGroup) {
	var first, weighted []string
	for _, k := range []string{evAgentKill, evPartition, evServerKill, evDiskFull} {
		if !b.kinds[k] {
			continue
		}
		first = append(first, k)
		weighted = append(weighted, k)
		if k == evAgentKill || k == evPartition {
			weighted = append(weighted, k)
		}
	}
	for i := len(first) - 1; i > 0; i-- {
		j := b.randN(i + 1)
		first[i], first[j] = first[j], first[i]
	}
	for n := 0; ; n++ {
		if sleep(ctx, b.randDur(b.c.chaosEvery/2, b.c.chaosEvery*3/2)) != nil {
			return
		}
		kind := weighted[b.randN(len(weighted))]
		if n < len(first) {
			kind = first[n]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.event(runCtx, kind)
		}()
	}
}

// event runs one chaos event; it heals what it broke when its time is up
// or ctx ends.
func (b *bench) event(ctx context.Context, kind string) {
	var err error
	acted := true
	switch kind {
	case evAgentKill, evPartition:
		a := b.takeAgent()
		if a == nil {
			acted = false
			break
		}
		defer b.releaseAgent(a)
		if kind == evAgentKill {
			err = b.killAgent(ctx, a)
		} else {
			err = b.partition(ctx, a)
		}
	case evServerKill, evDiskFull:
		if !b.take(kind) {
			acted = false
			break
		}
		defer b.release(kind)
		if kind == evServerKill {
			err = b.killServer(ctx)
		} else {
			err = b.fillDisk(ctx)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !acted {
		b.fig.skipped++
		return
	}
	if b.fig.events == nil {
		b.fig.events = map[string]int{}
	}
	b.fig.events[kind]++
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-chaos: %s: %v\n", kind, err)
	}
}

// takeAgent picks an agent no event holds, or nil.
func (b *bench) takeAgent() *agent {
	b.mu.Lock()
	defer b.mu.Unlock()
	var free []*agent
	for _, a := range b.agents {
		if !a.busy {
			free = append(free, a)
		}
	}
	if len(free) == 0 {
		return nil
	}
	a := free[b.randN(len(free))]
	a.busy = true
	return a
}

func (b *bench) releaseAgent(a *agent) {
	b.mu.Lock()
	a.busy = false
	b.mu.Unlock()
}

// isBusy says whether an event holds a (then its session is not waited
// for).
func (b *bench) isBusy(a *agent) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return a.busy
}

// take marks a server kill or a disk fill under way, unless one of its
// kind is (the two may overlap: a server restarted on a full disk).
func (b *bench) take(kind string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.storeOn[kind] {
		return false
	}
	if b.storeOn == nil {
		b.storeOn = map[string]bool{}
	}
	b.storeOn[kind] = true
	return true
}

func (b *bench) release(kind string) {
	b.mu.Lock()
	delete(b.storeOn, kind)
	b.mu.Unlock()
}

// killAgent SIGKILLs an agent and starts it again 1-10 s later with the
// same identity and state dir (a container restarted in its pod).
func (b *bench) killAgent(ctx context.Context, a *agent) error {
	b.mu.Lock()
	p := a.p
	b.mu.Unlock()
	t0 := time.Now()
	p.kill()
	if sleep(ctx, b.randDur(time.Second, 10*time.Second)) != nil {
		return ctx.Err() // the bench is stopping: nothing to restart
	}
	err := b.startAgent(a)
	b.mu.Lock()
	b.fig.agentDown = append(b.fig.agentDown, time.Since(t0))
	b.mu.Unlock()
	return err
}

// partition cuts an agent off for 5-60 s.
func (b *bench) partition(ctx context.Context, a *agent) error {
	if err := b.lab.partition(a.i, true); err != nil {
		return err
	}
	t0 := time.Now()
	_ = sleep(ctx, b.randDur(5*time.Second, 60*time.Second))
	err := b.lab.partition(a.i, false)
	b.mu.Lock()
	b.fig.partitions = append(b.fig.partitions, time.Since(t0))
	b.mu.Unlock()
	return err
}

// killServer SIGKILLs the server, starts it again on the same store 1-5 s
// later, and measures its recovery: until /readyz answers 200, and until
// every agent no event holds has opened a new session.
func (b *bench) killServer(ctx context.Context) error {
	b.mu.Lock()
	p := b.server
	var watch []*agent
	for _, a := range b.agents {
		if !a.busy {
			watch = append(watch, a)
		}
	}
	b.mu.Unlock()
	opened := map[*agent]int{}
	for _, a := range watch {
		opened[a] = countLines(a.log, `"msg":"agent session open"`)
	}
	t0 := time.Now()
	p.kill()
	if sleep(ctx, b.randDur(time.Second, 5*time.Second)) != nil {
		return ctx.Err() // the bench is stopping: nothing to restart
	}
	b.mu.Lock()
	b.fig.serverDown = append(b.fig.serverDown, time.Since(t0))
	b.mu.Unlock()

	// Start it until it holds: a start may fail (the store's lock not yet
	// released, a full disk meanwhile); it is tried again.
	restarted := time.Now()
	base := "http://" + b.listen
	for attempt := 0; ; attempt++ {
		if err := b.startServer(); err != nil {
			return err
		}
		b.mu.Lock()
		np := b.server
		b.mu.Unlock()
		err := waitReadyOrExit(ctx, base, np, 120*time.Second)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.mu.Lock()
		b.fig.serverStartFailures++
		b.mu.Unlock()
		if attempt == 5 {
			return fmt.Errorf("the server did not come back: %w", err)
		}
		np.kill()
		time.Sleep(time.Second)
	}
	ready := time.Since(restarted)

	// The agents' sessions, reopened.
	deadline := time.Now().Add(90 * time.Second)
	missed := false
	for _, a := range watch {
		for countLines(a.log, `"msg":"agent session open"`) <= opened[a] && !b.isBusy(a) && ctx.Err() == nil {
			if time.Now().After(deadline) {
				missed = true
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fig.recoverReady = append(b.fig.recoverReady, ready)
	if missed {
		b.fig.recoverMissed++
	} else {
		b.fig.recoverSessions = append(b.fig.recoverSessions, time.Since(restarted))
	}
	return nil
}

// waitReadyOrExit waits for /readyz 200 while the process runs.
func waitReadyOrExit(ctx context.Context, base string, p *proc, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := waitReady(ctx, base, limit)
	select {
	case <-p.done:
		return errors.New("the server exited")
	default:
	}
	return err
}

// fillDisk fills the store's filesystem to the last byte, holds it full
// for 10-30 s and frees it.
func (b *bench) fillDisk(ctx context.Context) error {
	path := filepath.Join(b.store, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	chunk := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				f.Close()
				return fmt.Errorf("fill: %w", err)
			}
			break
		}
	}
	for len(chunk) > 1 { // the last partial MiB
		chunk = chunk[:len(chunk)/2]
		w, _ := f.Write(chunk)
		n += int64(w)
	}
	f.Close()
	t0 := time.Now()
	_ = sleep(ctx, b.randDur(10*time.Second, 30*time.Second))
	if err := os.Remove(path); err != nil {
		return err
	}
	b.mu.Lock()
	b.fig.diskFull = append(b.fig.diskFull, time.Since(t0))
	b.fig.diskFilledMiB = append(b.fig.diskFilledMiB, float64(n)/(1<<20))
	b.mu.Unlock()
	return nil
}

// countLines counts the lines of path holding text.
func countLines(path, text string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(data), text)
}
