// Package cnicompare is the baseline of one network backend, labelled with
// the backend, for the comparison of backends side by side (bitrate,
// transfer and CPU at sender and receiver per connection), as the Calico
// and Flannel studies tabulate it.
package cnicompare

import (
	"errors"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/baseline"
)

// Suite is the baseline of one network backend, labelled with the
// backend, for the comparison table of the Calico and Flannel studies
// (bitrate, transfer and CPU at sender and receiver per connection and
// backend). A cluster has one backend, so one run measures one; the lab
// runs it once per backend on a fresh lab each (see ParseBackends) and
// joins the rows. It takes the baseline's settings.
type Suite struct{}

// Name implements Suite.
func (Suite) Name() string { return "cni-compare" }

// Describe implements Suite.
func (Suite) Describe() string {
	return "the baseline per network backend, compared side by side (bitrate, transfer, CPU at sender and receiver)"
}

// ComparesBackends implements suite.BackendComparer: the lab builds one
// network per backend for it.
func (Suite) ComparesBackends() bool { return true }

// Plan implements Suite.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	if o.Backend == "" {
		return nil, errors.New("suite cni-compare: the backend under test is not named (give --backends with the cluster's backend)")
	}
	bo, err := baseline.OptionsFrom(s.Name(), o)
	if err != nil {
		return nil, err
	}
	ph, err := baseline.PlanPhase(s.Name()+" on "+o.Backend, agents, bo, caps)
	if err != nil {
		return nil, err
	}
	return []suite.Phase{ph}, nil
}

// Rows implements Suite.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row { return suite.Rows(outcomes) }

// Presentation implements suite.Presenter: the baseline's table per
// backend and, always, the backends side by side.
func (Suite) Presentation() suite.Presentation { return baseline.Presentation(0) }
