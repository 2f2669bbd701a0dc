package labrun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/baseline"
)

func labName(t *testing.T) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "lr" + hex.EncodeToString(b[:])
}

// assertNoLab fails t when anything of the lab is left: its state, its
// namespaces, processes in them.
func assertNoLab(t *testing.T, name, stateDir string) {
	t.Helper()
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), lab.Prefix(name)) {
			t.Errorf("namespace left behind: %s", e.Name())
		}
	}
	if _, err := lab.Status(name, stateDir); !errors.Is(err, lab.ErrNotFound) {
		t.Errorf("lab %s still has state (status: %v)", name, err)
	}
}

// cleanupLab removes the lab if a failed test left it.
func cleanupLab(t *testing.T, name, stateDir string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := lab.Down(ctx, name, stateDir, nil); err == nil {
			t.Errorf("lab %s was left up by the run; removed it", name)
		}
	})
}

// TestBadInputBuildsNothing checks that bad lab flags are refused before
// any lab is made.
func TestBadInputBuildsNothing(t *testing.T) {
	nettest.Require(t)
	stateDir := t.TempDir()
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"zero nodes", Config{Lab: lab.Config{Nodes: 0, PodsPerNode: 2}}, "at least 1 node"},
		{"unknown backend", Config{Lab: lab.Config{Nodes: 2, PodsPerNode: 2}, Backends: []string{"host-gw", "flannel"}}, "unknown backend"},
		{"bad repeat", Config{Lab: lab.Config{Nodes: 2, PodsPerNode: 2}}, "repeat 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := labName(t)
			c.cfg.Lab.Name, c.cfg.Lab.StateDir = name, stateDir
			c.cfg.Suite = baseline.Suite{}
			c.cfg.Options = suite.Options{Time: time.Second, Repeat: 1}
			if c.name == "bad repeat" {
				c.cfg.Options.Repeat = 0
			}
			_, err := Run(context.Background(), c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want %q", err, c.want)
			}
			assertNoLab(t, name, stateDir)
		})
	}
}

// TestNameInUseLeavesTheOtherLab checks that a lab run whose name is taken
// fails without touching the lab that has it.
func TestNameInUseLeavesTheOtherLab(t *testing.T) {
	nettest.Require(t)
	name, stateDir := labName(t), t.TempDir()
	ctx := context.Background()
	l, err := lab.Up(ctx, lab.Config{Name: name, Nodes: 1, PodsPerNode: 1, StateDir: stateDir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := l.Down(ctx); err != nil {
			t.Errorf("down: %v", err)
		}
		assertNoLab(t, name, stateDir)
	})
	_, err = Run(ctx, Config{Lab: lab.Config{Name: name, Nodes: 2, PodsPerNode: 2, StateDir: stateDir},
		Suite: baseline.Suite{}, Options: suite.Options{Time: time.Second, Repeat: 1}})
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("err %v, want 'already exists'", err)
	}
	if st := l.Status(); !st.Healthy {
		t.Errorf("the existing lab was damaged: %+v", st)
	}
}
