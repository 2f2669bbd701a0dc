package suite

import (
	"context"
	"log/slog"
	"time"

	"github.com/cnperf/cnperf/internal/hostinfo"
)

// A Describer is an environment that can say what it is: per node the
// kernel, OS, CPUs, memory, MTUs, congestion control and offloads, and
// the CNI with its version and mode. The Runner stores it with every run
// of a suite, so each figure keeps the machine it was measured on.
type Describer interface {
	Environment(ctx context.Context) (*hostinfo.Environment, error)
}

// describeTimeout bounds reading the environment.
const describeTimeout = 20 * time.Second

// describe reads the environment when it can say what it is; a failure
// is logged and leaves what was read, with a note, never fails the run.
func (r *Runner) describe(ctx context.Context, log *slog.Logger) *hostinfo.Environment {
	d, ok := r.Env.(Describer)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	env, err := d.Environment(ctx)
	if err != nil {
		log.Warn("environment not fully read", "err", err)
		if env == nil {
			env = &hostinfo.Environment{}
		}
		env.Notes = append(env.Notes, err.Error())
	}
	return env
}
