package suite_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The rules of docs/ARCHITECTURE.md that a test can hold.

// forbidden are the imports a suite package must not pull in, directly or
// not: the places a suite runs (the lab, Kubernetes) and the kernel's and
// the cluster's client libraries. A suite says what it needs; its
// environment says how.
var forbidden = []string{
	"github.com/cnperf/cnperf/internal/lab",
	"github.com/cnperf/cnperf/internal/labrun",
	"github.com/cnperf/cnperf/internal/k8s",
	"github.com/cnperf/cnperf/internal/k8stest",
	"github.com/cnperf/cnperf/internal/qos", // netlink; qosspec is the data
	"github.com/vishvananda/",               // netlink, netns
	"k8s.io/",                               // client-go, apimachinery
	"sigs.k8s.io/",
}

// offending returns the packages of deps that a suite must not depend on.
func offending(deps []string) []string {
	var bad []string
	for _, d := range deps {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, strings.TrimSuffix(f, "/")+"/") {
				bad = append(bad, d)
			}
		}
	}
	return bad
}

func TestOffendingSpotsForbiddenImports(t *testing.T) {
	deps := []string{"fmt", "github.com/cnperf/cnperf/internal/qosspec", "github.com/cnperf/cnperf/internal/qos",
		"github.com/vishvananda/netlink", "k8s.io/client-go/kubernetes", "github.com/cnperf/cnperf/internal/k8s",
		"github.com/cnperf/cnperf/internal/labrun", "github.com/cnperf/cnperf/internal/suite"}
	want := []string{"github.com/cnperf/cnperf/internal/qos", "github.com/vishvananda/netlink", "k8s.io/client-go/kubernetes",
		"github.com/cnperf/cnperf/internal/k8s", "github.com/cnperf/cnperf/internal/labrun"}
	if got := offending(deps); !slices.Equal(got, want) {
		t.Errorf("offending = %v, want %v", got, want)
	}
}

// TestSuitesImportNoEnvironment runs go list -deps on every package
// below internal/suite: none may depend on the lab, Kubernetes, netlink or
// client-go.
func TestSuitesImportNoEnvironment(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH to list the packages' dependencies")
	}
	cmd := exec.Command(goBin, "list", "-deps", "./...")
	cmd.Dir = "."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/cnperf/cnperf/internal/suite/qospriority") {
		t.Fatalf("go list did not list the suites (%d packages)", len(deps))
	}
	if bad := offending(deps); len(bad) > 0 {
		t.Errorf("internal/suite/... depends on %v: a suite must not know where it runs (ask the environment through suite.Env)", bad)
	}
}

// TestNoSuiteOutsideTheSuitePackages: no type in internal/k8s or
// internal/cli is a suite (has both Plan and Rows): suites live in their
// own package below internal/suite and are reached through the registry.
func TestNoSuiteOutsideTheSuitePackages(t *testing.T) {
	for _, dir := range []string{"../k8s", "../cli"} {
		methods := map[string][]string{}
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v (%d files)", dir, err, len(files))
		}
		for _, f := range files {
			af, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range af.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
					continue
				}
				recv := fd.Recv.List[0].Type
				if st, ok := recv.(*ast.StarExpr); ok {
					recv = st.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					methods[id.Name] = append(methods[id.Name], fd.Name.Name)
				}
			}
		}
		for typ, ms := range methods {
			if slices.Contains(ms, "Plan") && slices.Contains(ms, "Rows") {
				t.Errorf("%s: type %s is a suite (Plan and Rows); suites belong below internal/suite", dir, typ)
			}
		}
	}
}

// TestEverySuitePackageIsRegistered: each suite's package below
// internal/suite is imported by the one registry, builtin.
func TestEverySuitePackageIsRegistered(t *testing.T) {
	src, err := os.ReadFile("builtin/builtin.go")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "builtin" || e.Name() == "suitetest" || e.Name() == "testdata" {
			continue
		}
		n++
		if !strings.Contains(string(src), `"github.com/cnperf/cnperf/internal/suite/`+e.Name()+`"`) {
			t.Errorf("suite package %s is not in builtin's registry", e.Name())
		}
	}
	if n < 6 {
		t.Errorf("%d suite packages found, want at least 6", n)
	}
}
