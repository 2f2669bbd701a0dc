package cnicompare

import (
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/baseline"
)

// Keys implements suite.Keyed: the baseline's settings.
func (Suite) Keys() []suite.Key { return baseline.Keys() }
