package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

// Matrix dispatch during the cluster hold: rounds of disjoint node pairs,
// each a run of the matrix suite (POST /api/v2/runs, suite "matrix", a
// TCP throughput probe per pair) created on the replicas in turn, so a
// task is often created on one replica and dispatched by another (the one
// holding its source agent's session). The simulators answer each task
// with a synthetic result over the session (sim.go), which the server
// keeps as the pair's coverage; a round starts when the previous one has
// finished and -hold-round has passed. Every -hold-solo-th round is one
// pair alone, measured apart: the difference from a full round's figures
// is the round's own work queued on the machine.

// nodeSize is how many simulated agents share a node name (sim.go's
// hello: node-i/20).
const nodeSize = 20

// dispatcher creates the rounds and keeps each task's creation time.
type dispatcher struct {
	clients []*client.Client // one per replica
	agents  int
	pairs   int
	solo    int // every solo-th round is one pair alone (0: none)
	every   time.Duration
	from    time.Time // rounds created before this are the warm-up: run, not counted

	mu      sync.Mutex           // guards sent and create
	sent    map[string]time.Time // task id → create request sent
	alone   map[string]bool      // task ids of the lone pairs' rounds
	create  []time.Duration      // each round's create call
	claimed map[string]time.Time // task id → dispatched_at (the server's claim), read once its round finished
	rounds  int                  // rounds created (counted)
	lone    int                  // of which one pair alone
	warm    int                  // warm-up rounds created
	done    int                  // rounds whose run finished
	failed  int                  // runs that ended other than succeeded, or could not be created or read
	lastErr error
}

func newDispatcher(bases []string, agents, pairs, solo int, every time.Duration) (*dispatcher, error) {
	d := &dispatcher{agents: agents, pairs: pairs, solo: solo, every: every, sent: map[string]time.Time{}, alone: map[string]bool{}, claimed: map[string]time.Time{}}
	for _, b := range bases {
		cl, err := client.New(b, userTok)
		if err != nil {
			return nil, err
		}
		d.clients = append(d.clients, cl)
	}
	return d, nil
}

// round picks pairs disjoint node pairs and an agent on each node.
func (d *dispatcher) round(pairs int) []api.RunTask {
	nodes := (d.agents + nodeSize - 1) / nodeSize
	k := min(2*pairs, nodes-nodes%2)
	perm := rand.Perm(nodes)[:k]
	agentOn := func(node int) int {
		return node*nodeSize + rand.IntN(min(nodeSize, d.agents-node*nodeSize))
	}
	excl := true
	var ts []api.RunTask
	for j := 0; j+1 < k; j += 2 {
		spec := probe.Spec{Kind: probe.KindTCP, Duration: probe.Duration(time.Second)}
		ts = append(ts, api.RunTask{Src: uid(agentOn(perm[j])), Dst: uid(agentOn(perm[j+1])), Type: api.TypeProbe, Spec: &spec, Exclusive: &excl})
	}
	return ts
}

// run creates rounds until stop ends and waits for the last one to
// finish (while ctx lasts).
func (d *dispatcher) run(ctx, stop context.Context) {
	for i := 0; stop.Err() == nil; i++ {
		t0 := time.Now()
		cl := d.clients[i%len(d.clients)]
		pairs, lone := d.pairs, d.solo > 0 && d.pairs > 1 && i%d.solo == d.solo-1
		if lone {
			pairs = 1
		}
		cctx, cancel := context.WithTimeout(stop, 30*time.Second)
		sent := time.Now()
		r, err := cl.CreateRun(cctx, api.RunCreate{Suite: matrix.SuiteName, Tasks: d.round(pairs)})
		cancel()
		if err != nil {
			if stop.Err() == nil {
				d.fail(fmt.Errorf("create matrix round: %w", err))
				time.Sleep(time.Second)
			}
			continue
		}
		counted := !sent.Before(d.from)
		d.mu.Lock()
		if counted {
			if !lone {
				d.create = append(d.create, time.Since(sent))
			}
			d.rounds++
			if lone {
				d.lone++
			}
			for _, t := range r.Tasks {
				d.sent[t.TaskID] = sent
				if lone {
					d.alone[t.TaskID] = true
				}
			}
		} else {
			d.warm++
		}
		d.mu.Unlock()
		d.wait(ctx, cl, r.ID, counted)
		select {
		case <-stop.Done():
		case <-time.After(d.every - time.Since(t0)):
		}
	}
}

// wait polls the run until it finishes (or 60 s pass, or ctx ends); a
// round not counted is only waited for.
func (d *dispatcher) wait(ctx context.Context, cl *client.Client, id string, counted bool) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := cl.GetRun(cctx, id)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				d.fail(fmt.Errorf("read matrix round %s: %w", id, err))
			}
			return
		}
		if r.State == api.RunRunning {
			continue
		}
		if !counted {
			if r.State != api.RunSucceeded {
				d.fail(fmt.Errorf("warm-up matrix round %s ended %s (%v)", id, r.State, r.Counts))
			}
			return
		}
		d.mu.Lock()
		d.done++
		for _, t := range r.Tasks {
			if t.DispatchedAt != nil {
				d.claimed[t.TaskID] = *t.DispatchedAt
			}
		}
		d.mu.Unlock()
		if r.State != api.RunSucceeded {
			d.fail(fmt.Errorf("matrix round %s ended %s (%v)", id, r.State, r.Counts))
		}
		return
	}
	if ctx.Err() == nil {
		d.fail(fmt.Errorf("matrix round %s still running after a minute", id))
	}
}

func (d *dispatcher) fail(err error) {
	d.mu.Lock()
	d.failed++
	first := d.lastErr == nil
	d.lastErr = err
	d.mu.Unlock()
	if first && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "serverbench:", err)
	}
}

// dispatchFigures is what the matrix dispatch measured.
type dispatchFigures struct {
	rounds, warm, done, failed int
	tasks, arrived             int
	lat                        []time.Duration // p50, p90, p99, max
	create                     []time.Duration // the create call's p50, p99
	toClaim, toAgent           []time.Duration // p50, p99 of create request → claim and claim → agent
	solo, soloRounds           int             // every solo-th round was one pair alone; how many were
	soloArrived                int             // their tasks that reached their agents
	soloLat                    []time.Duration // their p50, p99 (not in lat)
	lastErr                    error
}

// figures matches the tasks created with their arrivals at the
// simulators (task id → Unix nanoseconds; the same clock). The lone
// pairs' tasks count in tasks and arrived, and their latency apart.
func (d *dispatcher) figures(arrivals map[string]int64) dispatchFigures {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := dispatchFigures{rounds: d.rounds, warm: d.warm, done: d.done, failed: d.failed, tasks: len(d.sent), solo: d.solo, soloRounds: d.lone, lastErr: d.lastErr}
	var lat, soloLat, toClaim, toAgent []time.Duration
	for id, sent := range d.sent {
		if at, ok := arrivals[id]; ok {
			if d.alone[id] {
				soloLat = append(soloLat, time.Unix(0, at).Sub(sent))
				continue
			}
			lat = append(lat, time.Unix(0, at).Sub(sent))
			if c, ok := d.claimed[id]; ok {
				toClaim = append(toClaim, c.Sub(sent))
				toAgent = append(toAgent, time.Unix(0, at).Sub(c))
			}
		}
	}
	_, f.toClaim = percentiles(toClaim, 50, 99)
	_, f.toAgent = percentiles(toAgent, 50, 99)
	f.arrived, f.lat = percentiles(lat, 50, 90, 99, 100)
	f.soloArrived, f.soloLat = percentiles(soloLat, 50, 99)
	f.arrived += f.soloArrived
	_, f.create = percentiles(slices.Clone(d.create), 50, 99)
	return f
}
