package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/external"
)

// Causes of a task's context ending early.
var (
	errCancelledByServer = errors.New("cancelled by the server")
	errShutdown          = errors.New("agent shutting down")
)

// maxReason bounds the failure reason sent to the server.
const maxReason = 2000

// job is one task the agent holds, waiting for a slot or running.
type job struct {
	task    api.AgentTask
	ctx     context.Context
	cancel  context.CancelCauseFunc
	running bool // holds a slot; guarded by Agent.mu
}

func (a *Agent) jobIDs() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.jobs))
	for id := range a.jobs {
		ids = append(ids, id)
	}
	return ids
}

func (a *Agent) jobCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.jobs)
}

// queued counts the tasks waiting for a slot.
func (a *Agent) queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, j := range a.jobs {
		if !j.running {
			n++
		}
	}
	return n
}

// cancelTasks stops the named tasks with cause.
func (a *Agent) cancelTasks(ids []string, cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		if j := a.jobs[id]; j != nil {
			a.log.Info("stopping task", "task_id", id, "why", cause)
			j.cancel(cause)
		}
	}
}

// cancelAll stops every task with cause and refuses new ones.
func (a *Agent) cancelAll(cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopping = true
	for _, j := range a.jobs {
		j.cancel(cause)
	}
}

// accept takes a task from the server and starts its goroutine, which
// waits for a slot. A task id is started at most once: one already held,
// finished by this process or waiting in the outbox (finished by a
// previous one) is ignored, so a re-offer is idempotent.
func (a *Agent) accept(ctx context.Context, t api.AgentTask) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.jobs[t.TaskID]; dup || t.TaskID == "" || a.done.has(t.TaskID) || a.out.holds(t.TaskID) {
		if t.TaskID != "" {
			a.log.Debug("task offered again; already held or done", "task_id", t.TaskID)
		}
		return
	}
	if a.stopping {
		// Taken while stopping: not started, reported cancelled.
		a.out.add(api.Report{TaskID: t.TaskID, PodUID: a.id.PodUID, ReportID: uuid.NewString(),
			State: api.StateCancelled, Reason: errShutdown.Error()})
		return
	}
	// The task's context is not derived from ctx: on shutdown cancelAll
	// ends it with a cause, so the report says why.
	jctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	j := &job{task: t, ctx: jctx, cancel: cancel}
	a.jobs[t.TaskID] = j
	signal(a.sess.listsChanged)
	a.jobWG.Add(1)
	go func() {
		defer a.jobWG.Done()
		a.runJob(j)
	}()
}

// runJob waits for a slot, runs the task within its timeout and deadline,
// and queues its report.
func (a *Agent) runJob(j *job) {
	t := j.task
	log := a.log.With("task_id", t.TaskID, "type", t.Type)
	defer func() {
		a.mu.Lock()
		delete(a.jobs, t.TaskID)
		a.done.add(t.TaskID)
		a.mu.Unlock()
		signal(a.sess.listsChanged)
		j.cancel(nil)
		a.signalFreed()
	}()
	reportID := uuid.NewString()
	rep := api.Report{TaskID: t.TaskID, PodUID: a.id.PodUID, ReportID: reportID}

	// The task's time bounds: its timeout from now and the server's
	// deadline, whichever comes first.
	ctx := j.ctx
	var stop context.CancelFunc = func() {}
	if !t.Deadline.IsZero() {
		ctx, stop = context.WithDeadline(ctx, t.Deadline)
	}
	defer stop()
	if t.TimeoutS > 0 {
		var stop2 context.CancelFunc
		ctx, stop2 = context.WithTimeout(ctx, time.Duration(t.TimeoutS*float64(time.Second)))
		defer stop2()
	}

	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		a.finish(ctx, log, j, rep, nil, "", ctx.Err())
		return
	}
	defer func() { <-a.slots }()
	a.mu.Lock()
	j.running = true
	a.mu.Unlock()
	a.signalFreed()

	if t.Type == api.TypeQoSHold {
		res, err := a.hold(ctx, log, t)
		if errors.Is(err, errNotStarted) {
			// The server ended the task before it started, and the
			// set-up is removed again: the cancelled report tells the
			// server so (its acknowledgement, see store.Complete).
			log.Info("task not started", "err", err)
			rep.State, rep.Reason = api.StateCancelled, storableText(err.Error())
			a.out.add(rep)
			return
		}
		a.finish(ctx, log, j, rep, res, "", err)
		return
	}
	if err := a.markStarted(ctx, t.TaskID); err != nil {
		// The server no longer wants it (cancelled or ended meanwhile):
		// nothing to run, nothing to report.
		log.Info("task not started", "err", err)
		return
	}
	log.Info("task started", "dst", t.DstPodIP)
	res, raw, err := a.executeWithQoS(ctx, log, t)
	a.finish(ctx, log, j, rep, res, raw, err)
}

// errNotStarted: the server refused a task's start (it was cancelled or
// ended meanwhile), so no result is reported.
var errNotStarted = errors.New("the server refused the start")

// errRemoveFailed: removing a task's QoS set-up failed; a cancelled
// task's report says so in its reason (api.ReasonRemoveFailed).
var errRemoveFailed = errors.New(api.ReasonRemoveFailed)

// hold runs a qos-hold task: it applies the set-up first and only then
// tells the server the task started, so a running hold is one whose
// set-up is in place; it keeps the set-up until the spec's duration has
// passed (succeeded) or the task ends otherwise (cancelled when its
// environment is done with it, timed out, the agent stopping), and
// removes it before the task's report is queued: a report, cancelled
// included, means the set-up is gone (or says that removing it failed).
// The duration and the task's timeout bound the set-up's life on the
// agent itself, whatever becomes of whoever asked for it.
func (a *Agent) hold(ctx context.Context, log *slog.Logger, t api.AgentTask) (*probe.Result, error) {
	if t.QoS == nil || t.Spec == nil || t.Spec.Duration <= 0 {
		return nil, errors.New("qos-hold task without a set-up or a duration")
	}
	note, undo, err := a.applyQoS(ctx, log, t)
	if err != nil {
		return nil, err
	}
	if err := a.markStarted(ctx, t.TaskID); err != nil {
		if uerr := undo(); uerr != nil {
			return nil, fmt.Errorf("%w: %v; %w: %w", errNotStarted, err, errRemoveFailed, uerr)
		}
		return nil, fmt.Errorf("%w: %v", errNotStarted, err)
	}
	start := time.Now()
	timer := time.NewTimer(t.Spec.Duration.D())
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
	}
	res := &probe.Result{Notes: []string{note, fmt.Sprintf("qos: held for %.1f s", time.Since(start).Seconds())}}
	if uerr := undo(); uerr != nil {
		res.Notes = append(res.Notes, api.ReasonRemoveFailed+": "+uerr.Error())
		return res, fmt.Errorf("%w: %w", errRemoveFailed, uerr)
	}
	return res, nil
}

// markStarted tells the server the task starts. A refusal (409: the task
// ended, 404: not ours) is returned; a transport failure is not, since the
// result report moves the task on by itself.
func (a *Agent) markStarted(ctx context.Context, taskID string) error {
	for attempt := 0; attempt < 3; attempt++ {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.link.Start(sctx, taskID, a.id.PodUID)
		cancel()
		if err == nil {
			return nil
		}
		if st := api.StatusOf(err); st >= 400 && st < 500 {
			return err
		}
		if ctx.Err() != nil {
			return nil // the report will say what happened
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return nil
}

// finish classifies the outcome and queues the report.
func (a *Agent) finish(ctx context.Context, log *slog.Logger, j *job, rep api.Report, res *probe.Result, raw string, err error) {
	// The server refuses NUL and invalid UTF-8 (no store keeps them): a
	// tool's output is made storable, not dropped.
	rep.TaskResult = storableText(raw)
	if res != nil {
		// The output goes once, as TaskResult (stored apart from the
		// typed result), not a second time inside the result.
		if rep.TaskResult == "" {
			rep.TaskResult = storableText(res.Raw)
		}
		res.Raw = ""
		for i, n := range res.Notes {
			res.Notes[i] = storableText(n)
		}
		if b, merr := json.Marshal(res); merr == nil {
			rep.Result = b
		}
	}
	// A responder that never answered is "unreachable" in the task's
	// error, whatever the cause (engine.UnreachableError); the cause stays
	// in this agent's debug log.
	if ue := (*engine.UnreachableError)(nil); errors.As(err, &ue) {
		log.Debug("responder unreachable", "err", err)
		err = ue.Opaque()
	}
	cause := context.Cause(j.ctx)
	switch {
	case cause != nil && (errors.Is(cause, errCancelledByServer) || errors.Is(cause, errShutdown)):
		rep.State, rep.Reason = api.StateCancelled, cause.Error()
		if errors.Is(err, errRemoveFailed) {
			rep.Reason += ": " + err.Error()
		}
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || deadlinePassed(ctx):
		// (A probe whose socket deadline, set from ctx's, fired a moment
		// before ctx's own timer still ran out of time.)
		rep.State = api.StateTimedOut
		rep.Reason = fmt.Sprintf("ran past its time limit (timeout %.0fs)", j.task.TimeoutS)
		if err != nil {
			rep.Reason += ": " + err.Error()
		}
	case err != nil:
		rep.State, rep.Reason = api.StateFailed, err.Error()
	default:
		rep.State = api.StateSucceeded
	}
	if len(rep.Reason) > maxReason {
		rep.Reason = rep.Reason[:maxReason] + "..."
	}
	rep.Reason = storableText(rep.Reason)
	// Logged once the outbox holds the report (on disk with --state-dir):
	// a "task finished" line is a result this agent produced, the ledger
	// make bench-chaos compares with the store.
	a.out.add(rep)
	log.Info("task finished", "state", rep.State, "reason", rep.Reason, "report_id", rep.ReportID)
}

// executeWithQoS runs the task inside its QoS set-up, when it has one:
// applied before the probe starts, removed when it ends however it ends
// (success, failure, timeout, cancellation), and noted in the result.
func (a *Agent) executeWithQoS(ctx context.Context, log *slog.Logger, t api.AgentTask) (*probe.Result, string, error) {
	if t.QoS == nil {
		return a.execute(ctx, t)
	}
	if t.Type != api.TypeProbe {
		return nil, "", fmt.Errorf("qos set-up on a %s task: only probe tasks take one", t.Type)
	}
	note, undo, err := a.applyQoS(ctx, log, t)
	if err != nil {
		return nil, "", err
	}
	res, raw, err := a.execute(ctx, t)
	uerr := undo()
	if res != nil {
		res.Notes = append(res.Notes, note)
		if uerr != nil {
			res.Notes = append(res.Notes, api.ReasonRemoveFailed+": "+uerr.Error())
		}
	}
	if uerr != nil && (res == nil || ctx.Err() != nil) {
		// (A task that ended early reports it in its reason.)
		err = errors.Join(err, fmt.Errorf("%w: %w", errRemoveFailed, uerr))
	}
	return res, raw, err
}

// execute runs the task and returns the typed result and the raw output.
func (a *Agent) execute(ctx context.Context, t api.AgentTask) (*probe.Result, string, error) {
	if t.ServeError != "" {
		return nil, "", fmt.Errorf("destination could not start its %s server: %s", t.Type, t.ServeError)
	}
	switch {
	case t.Type == api.TypeProbe:
		if t.Spec == nil {
			return nil, "", errors.New("probe task without a spec")
		}
		spec := *t.Spec
		if spec.Kind == probe.KindWire && !a.id.HostNetwork {
			return nil, "", errors.New("a wire watch runs on a host-network agent (it watches the node's underlay); this agent is in a pod")
		}
		if spec.Kind == probe.KindQueue && !a.id.HostNetwork {
			return nil, "", errors.New("a queue watch runs on a host-network agent (it watches the node's qdiscs); this agent is in a pod")
		}
		if spec.Source == "" && !a.id.HostNetwork {
			spec.Source = a.id.PodIP
		}
		res, err := a.opts.Probers.Run(ctx, spec, probe.Env{Logger: a.log.With("task_id", t.TaskID), TestKey: t.TestKey})
		return res, "", err
	case api.IsV1Type(t.Type):
		target := t.DstPodIP
		if t.Type == api.TypeIperf || t.Type == api.TypeIperf3 {
			if t.DstPort != 0 {
				target = net.JoinHostPort(t.DstPodIP, strconv.Itoa(t.DstPort))
			}
		}
		inv, err := external.Build(t.Type, t.Param, target)
		if err != nil {
			return nil, "", fmt.Errorf("task_param refused: %w", err)
		}
		if t.Type != api.TypePing && t.Type != api.TypeTraceroute {
			// Send from the pod IP. (ping and traceroute pick the source
			// from the route, as in the seed; ping -I changes its header.)
			inv.Source = a.id.PodIP
		}
		out, err := external.Run(ctx, inv)
		raw := out.Raw
		if raw == "" && out.Stderr != "" {
			raw = out.Stderr
		}
		return out.Result, raw, err
	}
	return nil, "", fmt.Errorf("unknown task type %q", t.Type)
}

// storableText replaces invalid UTF-8 and NUL characters in s with U+FFFD,
// which the server accepts.
func storableText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return s
}

// doneSetSize bounds the task ids an agent remembers as finished. The
// server re-offers only tasks still dispatched, which a delivered report
// ends, so the set only has to cover the few seconds between a report and
// the server seeing it.
const doneSetSize = 4096

// doneSet remembers the latest finished task ids (FIFO, bounded).
type doneSet struct {
	ids  map[string]struct{}
	ring []string
	next int
}

func (d *doneSet) has(id string) bool {
	_, ok := d.ids[id]
	return ok
}

func (d *doneSet) add(id string) {
	if d.ids == nil {
		d.ids = make(map[string]struct{}, doneSetSize)
		d.ring = make([]string, doneSetSize)
	}
	if d.has(id) {
		return
	}
	if old := d.ring[d.next]; old != "" {
		delete(d.ids, old)
	}
	d.ring[d.next] = id
	d.ids[id] = struct{}{}
	d.next = (d.next + 1) % doneSetSize
}

// deadlinePassed reports whether ctx has a deadline that is already past.
func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
