package report

import (
	"fmt"
	"strings"

	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/suite"
)

// GroupBy pools runs of one suite by a field of the environment they ran
// on (hostinfo.Fields: kernel, os_image, cpus, cni, backend, ...), in
// order of first appearance: each group is one report whose rows are
// the suite's rows over the measurements of all its runs, every run's
// repetitions counted as repetitions of the group. Compare then sets
// the groups side by side, as seeds 002 and 003 tabulate per Linux
// distribution. Runs that carry no environment fall in the group
// "unknown".
func GroupBy(reg *suite.Registry, runs []*Report, field string) ([]*Report, error) {
	if _, ok := (hostinfo.Environment{}).Get(field); !ok {
		return nil, fmt.Errorf("--by %q: want one of %s", field, strings.Join(hostinfo.Fields, ", "))
	}
	var order []string
	groups := map[string][]*Report{}
	for _, r := range runs {
		v := "unknown"
		if r.Environment != nil {
			if got, _ := r.Environment.Get(field); got != "" {
				v = got
			}
		}
		if _, ok := groups[v]; !ok {
			order = append(order, v)
		}
		groups[v] = append(groups[v], r)
	}
	var out []*Report
	for _, v := range order {
		members := groups[v]
		first := members[0]
		g := &Report{Suite: first.Suite, Status: first.Status, Environment: first.Environment, Present: first.Present}
		var ids []string
		var all []suite.Outcome
		offset := 0
		for _, r := range members {
			ids = append(ids, r.RunID)
			most := 0
			for _, o := range r.Outcomes {
				o.Step.Repeat += offset
				most = max(most, o.Step.Repeat-offset+1)
				all = append(all, o)
			}
			offset += most
		}
		g.RunID = fmt.Sprintf("%s %s (%s)", field, v, strings.Join(ids, ", "))
		g.Outcomes = all
		g.Rows = suite.Rows(all)
		if reg != nil {
			if s, err := reg.Get(first.Suite); err == nil {
				g.Rows = s.Rows(all)
			}
		}
		suite.SetOverhead(g.Rows)
		out = append(out, g)
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("%w: every run has %s %q; --by needs runs that differ in it", ErrNotComparable, field, order[0])
	}
	return out, nil
}
