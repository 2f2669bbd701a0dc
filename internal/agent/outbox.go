package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// Delivery retry bounds.
const (
	deliverTimeout = 10 * time.Second
	retryMin       = 250 * time.Millisecond
	retryMax       = 5 * time.Second
)

// outbox delivers result reports until the server acknowledges each. A
// report keeps its ReportID across retries, so the server stores it once.
//
// With a directory (--state-dir/outbox) every report is written there, one
// file per report named by its ReportID, before it is queued, and removed
// once the server acknowledged it: results finished before the agent dies
// (SIGKILL, OOM, node reboot of an emptyDir's pod is not covered) are
// loaded and delivered by the next process, with the same ReportID, so the
// server stores them once. A file is written whole (temporary file, fsync,
// rename), so a crash leaves the old state or the new, never half a report.
//
// A report is deleted only once the server acknowledged it as stored. One
// the server refuses for good (a 4xx other than 408 and 429, e.g. 409 for
// a task that ended otherwise meanwhile) is moved to the dead-letter
// directory (outbox/dead, deadLetterDir) with a warning naming the file,
// where an operator can read it or deliver it again; it is never retried
// by itself. (The server stores late results of tasks it ended for the
// agent's absence, so an absence alone does not refuse a result.)
type outbox struct {
	cl  reporter
	log *slog.Logger
	dir string // "" keeps reports in memory only

	mu      sync.Mutex // guards pending
	pending []*delivery
	kick    chan struct{}
	// changed, when set, is called after a report is queued or
	// forgotten (the heartbeat's undelivered list changed).
	changed func()
}

type delivery struct {
	rep      api.Report
	file     string    // its file in dir, "" when not on disk
	attempts int       // send's alone
	next     time.Time // guarded by the outbox's mu
}

func newOutbox(cl reporter, log *slog.Logger, dir string) *outbox {
	return &outbox{cl: cl, log: log, dir: dir, kick: make(chan struct{}, 1)}
}

// outboxFileSuffix ends the name of a stored report.
const outboxFileSuffix = ".report.json"

// load queues the reports a previous process left in dir. A file that
// cannot be read as a report is moved aside (NAME.bad) with a warning.
func (o *outbox) load() error {
	if o.dir == "" {
		return nil
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return fmt.Errorf("agent: outbox directory: %w", err)
	}
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return fmt.Errorf("agent: read outbox: %w", err)
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(o.dir, name)
		if strings.HasSuffix(name, ".tmp") {
			_ = os.Remove(path) // a write the previous process did not finish
			continue
		}
		if !strings.HasSuffix(name, outboxFileSuffix) {
			continue
		}
		var rep api.Report
		b, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(b, &rep)
		}
		if err == nil && (rep.TaskID == "" || rep.ReportID == "") {
			err = errors.New("no task or report id")
		}
		if err != nil {
			o.log.Warn("unreadable report in the outbox; moved aside", "file", path, "err", err)
			_ = os.Rename(path, path+".bad")
			continue
		}
		o.pending = append(o.pending, &delivery{rep: rep, file: path})
		n++
	}
	if n > 0 {
		o.log.Info("results of a previous process to deliver", "reports", n, "dir", o.dir)
	}
	return nil
}

// persist writes the report to its file; the path, or "" and an error.
func (o *outbox) persist(rep api.Report) (string, error) {
	if o.dir == "" {
		return "", nil
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return "", err
	}
	// ReportIDs are the agent's own UUIDs: safe as file names.
	path := filepath.Join(o.dir, rep.ReportID+outboxFileSuffix)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	if d, err := os.Open(o.dir); err == nil {
		_ = d.Sync() // the rename itself survives a crash
		_ = d.Close()
	}
	return path, nil
}

// holds reports whether a report for the task waits for delivery.
func (o *outbox) holds(taskID string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, d := range o.pending {
		if d.rep.TaskID == taskID {
			return true
		}
	}
	return false
}

// taskIDs lists the tasks whose reports wait for delivery (a heartbeat's
// undelivered list), at most max.
func (o *outbox) taskIDs(max int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ids []string
	for _, d := range o.pending {
		if len(ids) == max {
			break
		}
		ids = append(ids, d.rep.TaskID)
	}
	return ids
}

// add writes the report to disk (when the outbox has a directory) and
// queues it for delivery now. A report that cannot be written is still
// delivered from memory.
func (o *outbox) add(rep api.Report) {
	file, err := o.persist(rep)
	if err != nil {
		o.log.Warn("cannot keep the result on disk; delivering it from memory only", "task_id", rep.TaskID, "dir", o.dir, "err", err)
	}
	o.mu.Lock()
	o.pending = append(o.pending, &delivery{rep: rep, file: file})
	o.mu.Unlock()
	select {
	case o.kick <- struct{}{}:
	default:
	}
	o.notify()
}

func (o *outbox) notify() {
	if o.changed != nil {
		o.changed()
	}
}

// len returns the number of reports not yet acknowledged.
func (o *outbox) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// due returns the deliveries whose next attempt is due, and when the next
// one after them is.
func (o *outbox) due(now time.Time) ([]*delivery, time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*delivery
	var next time.Time
	for _, d := range o.pending {
		if !d.next.After(now) {
			out = append(out, d)
		} else if next.IsZero() || d.next.Before(next) {
			next = d.next
		}
	}
	return out, next
}

// deadLetterDir is the directory below the outbox's that keeps reports
// the server refused for good.
const deadLetterDir = "dead"

// remove forgets a delivered report and deletes its file.
func (o *outbox) remove(d *delivery) {
	if d.file != "" {
		if err := os.Remove(d.file); err != nil && !errors.Is(err, os.ErrNotExist) {
			o.log.Warn("cannot remove a delivered report from the outbox", "file", d.file, "err", err)
		}
	}
	o.forget(d)
}

// deadLetter forgets a report the server refused for good, keeping its
// file in the dead-letter directory; it returns where ("" when the report
// was in memory only, or could not be moved: then it stays in the outbox
// directory, and the next process tries it again).
func (o *outbox) deadLetter(d *delivery) (string, error) {
	o.forget(d)
	if d.file == "" {
		return "", nil
	}
	dir := filepath.Join(o.dir, deadLetterDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("dead-letter directory: %w", err)
	}
	to := filepath.Join(dir, filepath.Base(d.file))
	if err := os.Rename(d.file, to); err != nil {
		return "", fmt.Errorf("move to the dead-letter directory: %w", err)
	}
	if f, err := os.Open(o.dir); err == nil {
		_ = f.Sync()
		_ = f.Close()
	}
	return to, nil
}

// forget drops a report from the queue.
func (o *outbox) forget(d *delivery) {
	defer o.notify()
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, p := range o.pending {
		if p == d {
			o.pending = append(o.pending[:i], o.pending[i+1:]...)
			return
		}
	}
}

// run delivers until ctx ends.
func (o *outbox) run(ctx context.Context) {
	for {
		ds, next := o.due(time.Now())
		for _, d := range ds {
			if ctx.Err() != nil {
				return
			}
			o.send(ctx, d)
		}
		if len(ds) > 0 {
			continue // look again: sending took time, more may be due
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = time.Until(next)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-o.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// send makes one delivery attempt. Acknowledged, the report is deleted;
// refused for good (a 4xx other than 408 and 429: the server will never
// take it), it goes to the dead-letter directory; otherwise it is retried
// with exponential back-off.
func (o *outbox) send(ctx context.Context, d *delivery) {
	sctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	reply, err := o.cl.Report(sctx, d.rep)
	cancel()
	log := o.log.With("task_id", d.rep.TaskID, "report_id", d.rep.ReportID)
	if err == nil {
		o.remove(d)
		if d.attempts > 0 || reply.Duplicate {
			log.Info("result delivered", "attempts", d.attempts+1, "duplicate", reply.Duplicate, "state", reply.State)
		}
		return
	}
	st := api.StatusOf(err)
	if st >= 400 && st < 500 && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests {
		switch to, derr := o.deadLetter(d); {
		case derr != nil:
			log.Error("result refused by the server; left in the outbox", "status", st, "err", err, "file", d.file, "move_err", derr)
		case to != "":
			log.Warn("result refused by the server; kept as a dead letter", "status", st, "err", err, "file", to)
		default:
			log.Error("result refused by the server; not kept (no --state-dir)", "status", st, "err", err, "state", d.rep.State, "reason", d.rep.Reason)
		}
		return
	}
	d.attempts++
	wait := retryMin << min(d.attempts-1, 5)
	wait = min(wait, retryMax)
	o.mu.Lock() // drain sets next too
	d.next = time.Now().Add(wait)
	o.mu.Unlock()
	if d.attempts == 1 || d.attempts%10 == 0 {
		log.Warn("result delivery failed; retrying", "attempts", d.attempts, "retry_in", wait, "err", err)
	}
}

// drain waits until every report is acknowledged or grace has passed.
func (o *outbox) drain(grace time.Duration) {
	deadline := time.Now().Add(grace)
	for o.len() > 0 && time.Now().Before(deadline) {
		o.mu.Lock()
		for _, d := range o.pending {
			d.next = time.Time{} // retry at once
		}
		o.mu.Unlock()
		select {
		case o.kick <- struct{}{}:
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}
}
