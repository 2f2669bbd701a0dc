// Package builtin is the one list of cnperf's suites. The CLI, the
// server's dashboard and the report all take their suites from Registry,
// so a new suite is its own package below internal/suite plus one line
// here.
package builtin

import (
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/baseline"
	"github.com/cnperf/cnperf/internal/suite/capacity"
	"github.com/cnperf/cnperf/internal/suite/cnicompare"
	"github.com/cnperf/cnperf/internal/suite/cniqos"
	"github.com/cnperf/cnperf/internal/suite/contention"
	"github.com/cnperf/cnperf/internal/suite/matrix"
	"github.com/cnperf/cnperf/internal/suite/netpol"
	"github.com/cnperf/cnperf/internal/suite/pmtu"
	"github.com/cnperf/cnperf/internal/suite/policing"
	"github.com/cnperf/cnperf/internal/suite/qospriority"
	"github.com/cnperf/cnperf/internal/suite/responsiveness"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// Suites returns every built-in suite, one line each.
func Suites() []suite.Suite {
	return []suite.Suite{
		baseline.Suite{},
		cnicompare.Suite{},
		qospriority.Suite{},
		shaping.Suite{},
		policing.Suite{},
		capacity.Suite{},
		contention.Suite{},
		matrix.Suite{},
		pmtu.Suite{},
		responsiveness.Suite{},
		netpol.Suite{},
		cniqos.Suite{},
	}
}

// Registry returns a registry of every built-in suite.
func Registry() *suite.Registry { return suite.NewRegistry(Suites()...) }
