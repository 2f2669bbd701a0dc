package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

// Dispatch through the real server: the server (server.New over the
// simulation's store, on a loopback listener) holds a session of a
// simulated agent on each node; each cycle, up to -dispatch-pairs pairs
// of the cycle's first round (disjoint, so no task waits for another)
// have their TCP measurement created as a matrix run through the API
// (POST /api/v2/runs), offered over the source agent's session and
// answered by it with the synthetic result, which the server keeps as
// the pair's coverage itself. Its latency is from the create request
// sent to the offer's arrival at the agent.

const (
	userTok  = "matrixsim-user-token"
	agentTok = "matrixsim-agent-token"
)

// dispatcher is the server, its agents and what their tasks took.
type dispatcher struct {
	srv    *httptest.Server
	user   *client.Client
	cancel context.CancelFunc
	wg     sync.WaitGroup
	up     atomic.Int64 // sessions open

	mu       sync.Mutex
	answers  map[[2]string]func() ([]byte, error) // source and destination uid → the synthetic result
	arrived  map[string]time.Time                 // task id → its offer's arrival at the agent
	lat      []time.Duration                      // create sent → offer arrived, every task dispatched
	create   []time.Duration                      // each create call
	answered int
	errs     int
	lastErr  error
}

// startDispatch serves st with the server and holds a session for each
// of eps, waiting (up to a minute and a half) for them all.
func startDispatch(ctx context.Context, st store.Store, eps []suite.Endpoint) (*dispatcher, error) {
	srv, err := server.New(server.Options{Store: st, UserToken: userTok, AgentToken: agentTok, NoSchedules: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Limits: server.Limits{MaxAgents: len(eps) + 100}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	d := &dispatcher{srv: httptest.NewServer(srv.Handler()), cancel: cancel, answers: map[[2]string]func() ([]byte, error){}, arrived: map[string]time.Time{}}
	d.wg.Go(func() { _ = srv.Run(ctx) })
	if d.user, err = client.New(d.srv.URL, userTok); err != nil {
		d.stop()
		return nil, err
	}
	agents, err := client.New(d.srv.URL, agentTok)
	if err != nil {
		d.stop()
		return nil, err
	}
	spread := min(time.Duration(len(eps))*4*time.Millisecond, 20*time.Second) // opens spread, 250 a second
	for i, e := range eps {
		delay := time.Duration(i) * spread / time.Duration(len(eps))
		d.wg.Go(func() { d.hold(ctx, agents, e, i, delay) })
	}
	for deadline := time.Now().Add(90 * time.Second); d.up.Load() < int64(len(eps)); {
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("dispatch: %d of %d agents' sessions open after 90 s (%v)", d.up.Load(), len(eps), d.err())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return d, nil
}

func (d *dispatcher) stop() {
	d.cancel()
	d.srv.CloseClientConnections()
	d.srv.Close()
	d.wg.Wait()
}

func (d *dispatcher) fail(err error) {
	d.mu.Lock()
	d.errs++
	d.lastErr = err
	d.mu.Unlock()
}

func (d *dispatcher) err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastErr
}

// hold keeps agent e's session, answering each task offered with its
// synthetic result.
func (d *dispatcher) hold(ctx context.Context, cl *client.Client, e suite.Endpoint, i int, delay time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	hello := api.Heartbeat{PodName: e.Name, PodNamespace: "matrixsim", PodUID: e.ID, PodIP: e.IP, NodeName: e.Node, NodeIP: e.IP,
		ResponderAddr: e.ResponderAddr, Version: "matrixsim", BootID: "boot-" + e.ID, ResponderKey: fmt.Sprintf("%064x", i+1)}
	var up atomic.Bool
	cl.HoldSession(ctx, client.SessionLoop{
		PodUID: e.ID,
		Hello:  func() api.Heartbeat { return hello },
		OnOffer: func(s *client.Session, fr api.FetchReply) {
			got := time.Now()
			ids := make([]string, 0, len(fr.Tasks))
			d.mu.Lock()
			for _, t := range fr.Tasks {
				ids = append(ids, t.TaskID)
				if _, ok := d.arrived[t.TaskID]; !ok {
					d.arrived[t.TaskID] = got
				}
			}
			d.mu.Unlock()
			if len(ids) == 0 {
				return
			}
			_ = s.Ack(ids)
			go d.answer(ctx, s, e.ID, fr.Tasks)
		},
		OnUp: func(s *client.Session) {
			up.Store(true)
			d.up.Add(1)
			_ = s.Pull()
		},
		OnDown: func(err error, _ bool) {
			if up.Swap(false) {
				d.up.Add(-1)
			}
			if err != nil && ctx.Err() == nil {
				d.fail(fmt.Errorf("agent %s session: %w", e.Node, err))
			}
		},
	})
}

// answer starts each task and reports its synthetic result.
func (d *dispatcher) answer(ctx context.Context, s *client.Session, uid string, tasks []api.AgentTask) {
	for _, t := range tasks {
		id := t.TaskID
		d.mu.Lock()
		res := d.answers[[2]string{uid, t.DstPodUID}]
		d.mu.Unlock()
		if res == nil {
			d.fail(fmt.Errorf("task %s offered to %s: not one of the simulation's", id, uid))
			continue
		}
		raw, err := res()
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err = s.Start(cctx, id); err == nil {
				_, err = s.Report(cctx, api.Report{TaskID: id, PodUID: uid, ReportID: "r-" + id, State: api.StateSucceeded, Result: raw})
			}
			cancel()
		}
		if err != nil {
			if ctx.Err() == nil {
				d.fail(fmt.Errorf("answer task %s: %w", id, err))
			}
			continue
		}
		d.mu.Lock()
		d.answered++
		d.mu.Unlock()
	}
	_ = s.Pull()
}

// dispatched is a step sent through the server, answered by result.
type dispatched struct {
	step   suite.Step
	result func() ([]byte, error)
}

// round creates steps as one matrix run, waits until it ends (a minute
// at most) and records each task's create-to-offer latency.
func (d *dispatcher) round(ctx context.Context, steps []dispatched) error {
	tasks := make([]api.RunTask, len(steps))
	for i, s := range steps {
		tasks[i] = s.step.Task() // as the server's scheduler creates it
	}
	// The answers are known before the create: an offer may reach its
	// agent before the create returns. A round's pairs are disjoint.
	d.mu.Lock()
	for _, s := range steps {
		d.answers[[2]string{s.step.Src.ID, s.step.Dst.ID}] = s.result
	}
	d.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	sent := time.Now()
	r, err := d.user.CreateRun(cctx, api.RunCreate{Suite: matrix.SuiteName, Tasks: tasks})
	took := time.Since(sent)
	cancel()
	if err != nil {
		return fmt.Errorf("create a matrix run of %d tasks: %w", len(tasks), err)
	}
	d.mu.Lock()
	d.create = append(d.create, took)
	d.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got, err := d.user.GetRun(gctx, r.ID)
		cancel()
		if err != nil {
			return fmt.Errorf("read matrix run %s: %w", r.ID, err)
		}
		if got.State != api.RunRunning {
			if got.State != api.RunSucceeded {
				return fmt.Errorf("matrix run %s ended %s (%v; %v)", r.ID, got.State, got.Counts, d.err())
			}
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("matrix run %s still running after a minute (%v; %v)", r.ID, got.Counts, d.err())
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, t := range r.Tasks {
		at, ok := d.arrived[t.TaskID]
		if !ok {
			return fmt.Errorf("task %s of run %s succeeded without reaching its agent", t.TaskID, r.ID)
		}
		d.lat = append(d.lat, at.Sub(sent))
		delete(d.arrived, t.TaskID)
	}
	for _, s := range steps {
		delete(d.answers, [2]string{s.step.Src.ID, s.step.Dst.ID})
	}
	return nil
}

// report prints the dispatch figures.
func (d *dispatcher) report(cpu time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	lat := slices.Clone(d.lat)
	slices.Sort(lat)
	cr := slices.Clone(d.create)
	slices.Sort(cr)
	pct := func(s []time.Duration, q float64) time.Duration {
		if len(s) == 0 {
			return 0
		}
		return s[min(len(s)-1, int(q*float64(len(s))))].Round(10 * time.Microsecond)
	}
	fmt.Printf("dispatch through the server (%d agents' sessions held; %d runs, %d tasks created, offered and answered over sessions): create sent -> offer at the agent p50 %s, p99 %s, max %s; create call p50 %s, p99 %s; %.0f µs CPU a task (server and agents, one process); %d errors\n",
		d.up.Load(), len(d.create), len(lat), pct(lat, 0.5), pct(lat, 0.99), pct(lat, 1), pct(cr, 0.5), pct(cr, 0.99), us(cpu, len(lat)), d.errs)
}

func marshalResult(v any) func() ([]byte, error) {
	return func() ([]byte, error) { return json.Marshal(v) }
}
