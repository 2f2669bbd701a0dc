package suite

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"golang.org/x/sys/unix"
)

// progress writes the progress line.
type progress struct {
	w       io.Writer
	suite   string
	total   int
	start   time.Time
	tty     bool
	last    string
	written bool
}

func newProgress(w io.Writer, suite string, total int) *progress {
	return &progress{w: w, suite: suite, total: total, start: time.Now(), tty: isTerminal(w)}
}

// update shows what runs now in phase ph (whose steps start at done).
func (p *progress) update(ph Phase, run api.Run, done int) {
	if p.w == nil || time.Since(p.start) < progressAfter {
		return
	}
	tasks := append([]api.TaskV2(nil), run.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID })
	finished := 0
	var now []string
	for i, t := range tasks {
		if api.TerminalState(t.State) {
			finished++
			continue
		}
		if (t.State == api.StateRunning || t.State == api.StateDispatched) && i < len(ph.Steps) {
			st := ph.Steps[i]
			now = append(now, fmt.Sprintf("%s %s #%d (%s → %s)", st.Measure, st.Connection, st.Repeat+1, EndpointLabel(st.Src), EndpointLabel(st.Dst)))
		}
	}
	if len(run.Tasks) == 0 {
		finished = run.Counts[api.StateSucceeded] + run.Counts[api.StateFailed] + run.Counts[api.StateTimedOut] + run.Counts[api.StateCancelled]
	}
	left := p.total - done - finished
	what := "waiting for agents"
	switch {
	case len(now) > 0:
		what = strings.Join(now, ", ")
	case left == 0:
		what = "done"
	}
	key := fmt.Sprintf("%s: %s; %d of %d left", p.suite, what, left, p.total)
	line := fmt.Sprintf("%s; %s elapsed", key, time.Since(p.start).Round(time.Second))
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r\033[K%s", line)
	case key != p.last:
		// Not a terminal (a log, CI): a line per change, not per poll.
		fmt.Fprintln(p.w, line)
	}
	p.last = key
	p.written = true
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// finish ends the progress line on a terminal.
func (p *progress) finish() {
	if p.tty && p.written {
		fmt.Fprintln(p.w)
	}
}
