package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
)

// taskTimeout bounds each task on its agent.
const taskTimeout = 15 * time.Second

// newTask is a short probe between two random agents: rr or udp for
// 0.2-1 s, or a ping of 3 echoes 0.2 s apart.
func (b *bench) newTask() api.RunTask {
	src := b.randN(b.c.agents)
	dst := (src + 1 + b.randN(b.c.agents-1)) % b.c.agents
	d := probe.Duration(b.randDur(200*time.Millisecond, time.Second))
	var spec probe.Spec
	switch b.randN(3) {
	case 0:
		spec = probe.Spec{Kind: "rr", Duration: d}
	case 1:
		rate := uint64(10_000_000)
		spec = probe.Spec{Kind: "udp", Duration: d, RateBps: &rate}
	default:
		spec = probe.Spec{Kind: "ping", Count: 3, Interval: probe.Duration(200 * time.Millisecond)}
	}
	no := false
	return api.RunTask{Src: fmt.Sprintf("chaos-%d-uid", src), Dst: fmt.Sprintf("chaos-%d-uid", dst),
		Spec: &spec, Timeout: probe.Duration(taskTimeout), Exclusive: &no}
}

// createTasks creates -tasks tasks in runs of -run-size at -rate, each
// run tried until the server takes it (a refusal or a failure is counted
// and tried again a second later).
func (b *bench) createTasks(ctx context.Context) error {
	every := time.Duration(float64(b.c.runSize) / b.c.rate * float64(time.Second))
	next := time.Now()
	for made := 0; made < b.c.tasks; {
		if err := sleep(ctx, time.Until(next)); err != nil {
			return err
		}
		next = next.Add(every)
		rc := api.RunCreate{Suite: "chaos"}
		for range min(b.c.runSize, b.c.tasks-made) {
			rc.Tasks = append(rc.Tasks, b.newTask())
		}
		for {
			_, err := b.cl.CreateRun(ctx, rc)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			st := api.StatusOf(err)
			b.mu.Lock()
			if st == 503 {
				b.fig.create503++
			} else {
				b.fig.createOther++
			}
			b.mu.Unlock()
			if st >= 400 && st < 500 && st != 408 && st != 429 {
				return fmt.Errorf("a run refused for good: %w", err)
			}
			if err := sleep(ctx, time.Second); err != nil {
				return err
			}
		}
		made += len(rc.Tasks)
		b.mu.Lock()
		b.fig.runsCreated++
		b.fig.tasksCreated += len(rc.Tasks)
		b.mu.Unlock()
		if made%100 < len(rc.Tasks) {
			fmt.Printf("  %v: %d tasks created, %d chaos events\n", time.Since(b.fig.started).Round(time.Second), made, b.eventsSoFar())
		}
	}
	return nil
}

func (b *bench) eventsSoFar() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fig.eventCount()
}

// allTasks lists every task the store holds.
func (b *bench) allTasks(ctx context.Context) ([]api.TaskV2, error) {
	var all []api.TaskV2
	var after int64
	for {
		p, err := b.cl.ListTasks(ctx, client.TaskQuery{Limit: 1000, After: after})
		if err != nil {
			return nil, err
		}
		all = append(all, p.Tasks...)
		if p.NextAfter == 0 || len(p.Tasks) == 0 {
			return all, nil
		}
		after = p.NextAfter
	}
}

// waitTasksEnd waits until every task is in an end state, or limit has
// passed (then the tasks are returned with errNotEnded).
func (b *bench) waitTasksEnd(ctx context.Context, limit time.Duration) ([]api.TaskV2, error) {
	deadline := time.Now().Add(limit)
	for {
		tasks, err := b.allTasks(ctx)
		if err == nil {
			open := 0
			for _, t := range tasks {
				if !api.TerminalState(t.State) {
					open++
				}
			}
			if open == 0 {
				return tasks, nil
			}
			if time.Now().After(deadline) {
				return tasks, fmt.Errorf("%w: %d of %d not ended %v after the chaos", errNotEnded, open, len(tasks), limit)
			}
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("list the tasks: %w", err)
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return nil, err
		}
	}
}

// waitOutboxesEmpty waits until no agent holds an undelivered report.
func (b *bench) waitOutboxesEmpty(ctx context.Context, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n := 0
		for _, a := range b.agents {
			n += len(outboxFiles(a.state))
		}
		if n == 0 {
			return
		}
		_ = sleep(ctx, time.Second)
	}
}

// outboxFiles lists the reports an agent's outbox still holds (not its
// dead letters).
func outboxFiles(stateDir string) []string {
	m, _ := filepath.Glob(filepath.Join(stateDir, "outbox", "*.report.json"))
	return m
}

func deadLetters(stateDir string) []string {
	m, _ := filepath.Glob(filepath.Join(stateDir, "outbox", "dead", "*"))
	return m
}
