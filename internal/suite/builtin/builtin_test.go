package builtin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/capacity"
	"github.com/cnperf/cnperf/internal/suite/policing"
	"github.com/cnperf/cnperf/internal/suite/qospriority"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// TestCheckOptionsBeforeAnythingIsBuilt: the CLI checks settings before it
// builds a lab, when the backend is not known yet.
func TestCheckOptionsBeforeAnythingIsBuilt(t *testing.T) {
	o := func(kv ...string) suite.Options {
		set := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			set[kv[i]] = kv[i+1]
		}
		return suite.Options{Time: time.Second, Repeat: 1, Set: set}
	}
	var checkers []suite.OptionsChecker
	for _, s := range []suite.Suite{qospriority.Suite{}, shaping.Suite{}, policing.Suite{}, capacity.Suite{}} {
		if c, ok := s.(suite.OptionsChecker); ok {
			checkers = append(checkers, c)
		}
	}
	if len(checkers) != 4 {
		t.Fatalf("%d checkers", len(checkers))
	}
	if err := (qospriority.Suite{}).CheckOptions(o("variants", "vxlan,vxlan-inherit")); err != nil {
		t.Errorf("vxlan variants before the backend is known: %v", err)
	}
	for _, c := range []struct {
		s    suite.OptionsChecker
		o    suite.Options
		want string
	}{
		{qospriority.Suite{}, o("high-dscp", "64"), "DSCP 64 is outside 0-63"},
		{shaping.Suite{}, o("egress-bandwidth", "0"), "rate 0"},
		{capacity.Suite{}, o("paths", "moon"), `path "moon"`},
		{policing.Suite{}, o("variants", "shape"), `variant "shape"`},
	} {
		if err := c.s.CheckOptions(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%T: %v, want %q", c.s, err, c.want)
		}
	}
}
