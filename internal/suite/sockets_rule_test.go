package suite_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// contract are the packages that describe tests and results and talk to
// the server over HTTP: they open no probe socket and import no netlink.
var contract = []string{"../api", "./...", "../report"}

// socketPackages are what opens sockets or talks to the kernel: the probe
// engines and the responder, raw UDP I/O, netlink and the readers of the
// host. The contract packages must not depend on them, directly or not.
var socketPackages = []string{
	"github.com/cnperf/cnperf/internal/probe/engine",
	"github.com/cnperf/cnperf/internal/probe/udpio",
	"github.com/cnperf/cnperf/internal/probe/tcp",
	"github.com/cnperf/cnperf/internal/probe/udp",
	"github.com/cnperf/cnperf/internal/probe/rr",
	"github.com/cnperf/cnperf/internal/probe/icmp",
	"github.com/cnperf/cnperf/internal/probe/stamp",
	"github.com/cnperf/cnperf/internal/probe/external",
	"github.com/cnperf/cnperf/internal/probe/iperf3wire",
	"github.com/cnperf/cnperf/internal/probe/wirewatch",
	"github.com/cnperf/cnperf/internal/probe/queuewatch",
	"github.com/cnperf/cnperf/internal/hostinfo/hostread",
	"github.com/cnperf/cnperf/internal/ethtool",
	"github.com/cnperf/cnperf/internal/qos",
	"github.com/vishvananda/", // netlink, netns
}

// socketDeps lists the dependencies of pkgs (go list -deps) that are, or
// sit below, a socketPackages entry.
func socketDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH to list the packages' dependencies")
	}
	out, err := exec.Command(goBin, append([]string{"list", "-deps"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list -deps %v: %v", pkgs, err)
	}
	var bad []string
	for _, d := range strings.Fields(string(out)) {
		for _, f := range socketPackages {
			if d == f || strings.HasPrefix(d, strings.TrimSuffix(f, "/")+"/") {
				bad = append(bad, d)
			}
		}
	}
	slices.Sort(bad)
	return slices.Compact(bad)
}

// TestContractOpensNoSockets: api, the suites and the report depend on
// the probe contract (internal/probe) and the data packages only.
func TestContractOpensNoSockets(t *testing.T) {
	if bad := socketDeps(t, contract...); len(bad) > 0 {
		t.Errorf("internal/api, internal/suite/... or internal/report depend on %v: they describe tests and results; sockets and netlink belong to the engines and environments", bad)
	}
}

// TestSocketRuleCatchesAPlantedImport: a package that imports the
// responder's package, or netlink, is caught.
func TestSocketRuleCatchesAPlantedImport(t *testing.T) {
	for _, c := range []struct{ imp, want string }{
		{"github.com/cnperf/cnperf/internal/probe/engine", "github.com/cnperf/cnperf/internal/probe/engine"},
		{"github.com/cnperf/cnperf/internal/probe/tcp", "github.com/cnperf/cnperf/internal/probe/udpio"},
		{"github.com/vishvananda/netlink", "github.com/vishvananda/netlink"},
		{"github.com/cnperf/cnperf/internal/probe", ""},
	} {
		// A directory starting with "_" is left out of ./... patterns, so
		// other builds of the tree never see the planted package.
		dir, err := os.MkdirTemp(".", "_planted-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		src := "package planted\n\nimport _ \"" + c.imp + "\"\n"
		if err := os.WriteFile(filepath.Join(dir, "planted.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		bad := socketDeps(t, "./"+dir)
		switch {
		case c.want == "" && len(bad) > 0:
			t.Errorf("import %s: flagged %v", c.imp, bad)
		case c.want != "" && !slices.Contains(bad, c.want):
			t.Errorf("import %s: findings %v, want %s among them", c.imp, bad, c.want)
		}
	}
}
