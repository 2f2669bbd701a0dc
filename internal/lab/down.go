package lab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// down removes a lab: processes first (recorded ones, and any process in
// one of its namespaces), then namespaces (recorded and by prefix), then
// the state file. mine, when not nil, is the Lab value that made the lab
// in this process (its children are reaped).
func down(ctx context.Context, name, stateDir string, log *slog.Logger, mine *Lab) (DownReport, error) {
	rep := DownReport{Name: name}
	path := stateFile(stateDir, name)
	st := mine
	if cur, err := load(path); err == nil {
		rep.StateFound = true
		if st == nil {
			st = cur
		} else {
			// Process records other invocations added.
			st.Processes = mergeRecords(st.Processes, cur.Processes)
		}
	} else if !errors.Is(err, ErrNotFound) {
		log.Warn("lab state unreadable; removing by prefix", "lab", name, "err", err)
	}
	left := leftoverNamespaces(name)
	if st == nil && len(left) == 0 {
		return rep, fmt.Errorf("lab %q does not exist (no state file %s, no namespaces named %s*): %w", name, path, Prefix(name), ErrNotFound)
	}
	var names []string
	if st != nil {
		names = append(names, st.Namespaces...)
	}
	for _, n := range left {
		if !slices.Contains(names, n) {
			names = append(names, n)
			rep.Leftovers = append(rep.Leftovers, n)
		}
	}
	sort.Strings(rep.Leftovers)

	// Stop processes while the namespaces can still be found by inode.
	var vs []victim
	if st != nil {
		for _, p := range st.Processes {
			vs = append(vs, victim{p.PID, p.StartTicks})
		}
	}
	vs = append(vs, processesIn(names)...)
	killed, perr := stopProcesses(ctx, vs)
	rep.ProcessesKilled = killed
	if mine != nil && mine.procs != nil {
		mine.procs.mu.Lock()
		for pid, done := range mine.procs.done {
			select {
			case <-done:
			case <-ctx.Done():
			}
			delete(mine.procs.done, pid)
		}
		mine.procs.mu.Unlock()
	}

	var errs []error
	if perr != nil {
		errs = append(errs, perr)
	}
	for _, n := range names {
		existed := nsExists(n)
		if err := deleteNS(n); err != nil {
			errs = append(errs, err)
			continue
		}
		if existed {
			rep.Namespaces = append(rep.Namespaces, n)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove state file: %w", err))
	}
	_ = os.Remove(path + ".tmp")
	// The control plane's default directory (database, logs, tokens).
	if err := os.RemoveAll(filepath.Join(stateDir, name+".d")); err != nil {
		errs = append(errs, fmt.Errorf("remove control plane dir: %w", err))
	}
	if len(rep.Leftovers) > 0 {
		log.Warn("lab: removed leftover namespaces found by prefix", "lab", name, "count", len(rep.Leftovers), "state_found", rep.StateFound)
	}
	log.Info("lab down", "lab", name, "namespaces", len(rep.Namespaces), "processes", len(rep.ProcessesKilled))
	if err := errors.Join(errs...); err != nil {
		return rep, fmt.Errorf("lab down %s: %w", name, err)
	}
	return rep, nil
}

func mergeRecords(a, b []ProcessRecord) []ProcessRecord {
	out := slices.Clone(a)
	for _, r := range b {
		if !slices.ContainsFunc(out, func(x ProcessRecord) bool { return x.PID == r.PID && x.StartTicks == r.StartTicks }) {
			out = append(out, r)
		}
	}
	return out
}
