// Package labrun runs a suite on fresh labs, as `cnperf lab run` does: for
// each backend it builds a lab, starts the cnperf server and agents in it,
// runs the suite through the server's API, keeps the rows and removes the
// lab again, also when a step fails or the context is cancelled. A
// cni-compare over several backends builds one lab per backend, one after
// the other, because a backend is a property of the whole network.
//
// It needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), like the lab.
package labrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/suite"
)

// Config is one lab run.
type Config struct {
	// Lab is the lab to build; its Backend is replaced by each of Backends.
	Lab lab.Config
	// Backends lists the backends to measure, one lab each, in order;
	// empty means Lab.Backend (default host-gw).
	Backends []string
	// Suite and Options say what to run.
	Suite   suite.Suite
	Options suite.Options
	// Cnperf says how to start the control plane (binary, log level).
	Cnperf lab.CnperfOptions
	// Progress gets the runner's progress line and one line per lab step
	// (nil: none).
	Progress io.Writer
	Log      *slog.Logger
	// Zones, when above 0, gives the lab's nodes the label
	// topology.kubernetes.io/zone, zone-a, zone-b, ... in turn (n1 in
	// zone-a, n2 in zone-b, ...), for the matrix's plan=zones.
	Zones int
	// Done, when set, is called after the suite ran on a lab, with a
	// client of the lab's server, before the lab is removed (cnperf lab
	// run matrix reads the coverage the server kept).
	Done func(ctx context.Context, c *client.Client) error
}

// Run runs cfg's suite on one fresh lab per backend and returns the
// suite's report of each (their runs kept for report.FromLive, as the
// labs' servers are gone). Every lab is removed before Run returns.
func Run(ctx context.Context, cfg Config) ([]suite.Report, error) {
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	backends := cfg.Backends
	if len(backends) == 0 {
		b := cfg.Lab.Backend
		if b == "" {
			b = lab.BackendHostGW
		}
		backends = []string{b}
	}
	// Check everything before building anything.
	if err := cfg.Options.Validate(); err != nil {
		return nil, err
	}
	for _, b := range backends {
		c := cfg.Lab
		c.Backend = b
		if err := c.Validate(); err != nil {
			return nil, err
		}
	}
	if err := lab.CheckPrivileges(); err != nil {
		return nil, err
	}
	var reps []suite.Report
	inv := fmt.Sprintf("lab-%d", time.Now().UnixNano())
	for _, b := range backends {
		rep, err := runOne(ctx, cfg, b, inv, log)
		if err != nil {
			return reps, fmt.Errorf("backend %s: %w", b, err)
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// runOne builds the lab for one backend, runs the suite and removes the
// lab.
func runOne(ctx context.Context, cfg Config, backend, inv string, log *slog.Logger) (rep suite.Report, err error) {
	c := cfg
	c.Lab.Backend = backend
	c.Log = log
	err = session(ctx, c, func(ctx context.Context, r *suite.Runner) error {
		r.Invocation = inv
		o := cfg.Options
		o.Backend = backend
		var rerr error
		rep, rerr = r.Run(ctx, cfg.Suite, o)
		if rerr == nil && cfg.Done != nil {
			c, ok := r.API.(*client.Client)
			if !ok {
				return fmt.Errorf("lab run: the runner's API is a %T, not the server's client", r.API)
			}
			rerr = cfg.Done(ctx, c)
		}
		return rerr
	})
	return rep, err
}

// Session builds one fresh lab (cfg.Lab, its backend default host-gw),
// starts the cnperf server and agents in it and calls fn with a Runner on
// them, for callers that run several suites on one lab (cnperf lab
// evaluate). The lab is removed before Session returns, also when fn fails
// or ctx ends. cfg.Suite, Options and Backends are not used.
func Session(ctx context.Context, cfg Config, fn func(ctx context.Context, r *suite.Runner) error) error {
	if cfg.Lab.Backend == "" {
		cfg.Lab.Backend = lab.BackendHostGW
	}
	if err := cfg.Lab.Validate(); err != nil {
		return err
	}
	if err := lab.CheckPrivileges(); err != nil {
		return err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return session(ctx, cfg, fn)
}

// session builds the lab of cfg.Lab, starts cnperf in it, calls fn with a
// Runner on it and removes the lab.
func session(ctx context.Context, cfg Config, fn func(ctx context.Context, r *suite.Runner) error) (err error) {
	c, log, backend := cfg.Lab, cfg.Log, cfg.Lab.Backend
	say := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	t0 := time.Now()
	l, err := lab.Up(ctx, c, log)
	if err != nil {
		return err
	}
	say("lab %s up: %s, %d nodes x %d pods (%v)", l.Name, backend, c.Nodes, c.PodsPerNode, time.Since(t0).Round(time.Millisecond))
	// Down runs whatever happens, with its own bounded context so that an
	// interrupt still cleans up.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		if _, derr := l.Down(dctx); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove lab %s: %w", l.Name, derr))
			return
		}
		say("lab %s down", l.Name)
	}()
	co := cfg.Cnperf
	co.HostAgents = true
	keepLogs := false
	if co.Dir == "" {
		d, derr := os.MkdirTemp("", "cnperf-lab-"+l.Name+"-")
		if derr != nil {
			return derr
		}
		co.Dir = d
		defer func() {
			if keepLogs {
				return
			}
			_ = os.RemoveAll(d)
		}()
	}
	t1 := time.Now()
	cp, err := l.StartCnperf(ctx, co)
	if err != nil {
		keepLogs = true
		return err
	}
	say("cnperf server and %d agents up (%v)", cp.Agents, time.Since(t1).Round(time.Millisecond))
	api, err := cp.Client()
	if err != nil {
		return err
	}
	env := NewEnv(l)
	env.zones = cfg.Zones
	r := &suite.Runner{API: api, Env: env, Progress: cfg.Progress, Log: log}
	if err := fn(ctx, r); err != nil {
		keepLogs = true
		return fmt.Errorf("%w (server and agent logs kept in %s)", err, co.Dir)
	}
	return nil
}
