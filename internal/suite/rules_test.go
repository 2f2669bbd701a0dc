package suite_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

// backendName matches the names of network backends (the lab's and the
// CNIs' datapath modes). Only the environment knows which one a run is on;
// a suite reads what it needs from Caps (PathMTU, Encap, AsIs).
var backendName = regexp.MustCompile(`\b(host-gw|vxlan|ipip|geneve|wireguard)\b`)

// placeChecks returns where the Go source src, a suite package's file,
// knows where it runs: a string literal naming a backend (but a
// constant named Variant..., a variant's name that users type), the
// environment kinds KindKubernetes and KindLab, or a comparison of a
// .Kind with anything but a probe kind (probe.KindTCP).
func placeChecks(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, err
	}
	var bad []string
	report := func(n ast.Node, what string) {
		bad = append(bad, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
	}
	isKind := func(e ast.Expr) bool {
		s, ok := e.(*ast.SelectorExpr)
		return ok && s.Sel.Name == "Kind"
	}
	isProbe := func(e ast.Expr) bool {
		s, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		id, ok := s.X.(*ast.Ident)
		return ok && id.Name == "probe"
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for _, id := range n.Names {
				if strings.HasPrefix(id.Name, "Variant") {
					return false // a variant's name, as users type it
				}
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && backendName.MatchString(n.Value) {
				report(n, "names a backend: "+n.Value)
			}
		case *ast.Ident:
			if n.Name == "KindKubernetes" || n.Name == "KindLab" {
				report(n, "checks the environment's kind: "+n.Name)
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) &&
				(isKind(n.X) && !isProbe(n.Y) || isKind(n.Y) && !isProbe(n.X)) {
				report(n, "compares a .Kind that is not a probe's")
			}
		case *ast.SwitchStmt:
			if n.Tag != nil && isKind(n.Tag) {
				for _, st := range n.Body.List {
					for _, e := range st.(*ast.CaseClause).List {
						if !isProbe(e) {
							report(e, "switches on a .Kind that is not a probe's")
						}
					}
				}
			}
		}
		return true
	})
	return bad, nil
}

// TestSuitesDoNotKnowWhereTheyRun: no suite package (below internal/suite,
// tests aside) names a backend or checks the environment's kind.
func TestSuitesDoNotKnowWhereTheyRun(t *testing.T) {
	files, err := filepath.Glob("*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		bad, err := placeChecks(name, src)
		if err != nil {
			t.Fatal(err)
		}
		n++
		for _, b := range bad {
			t.Errorf("%s: a suite must not know where it runs (read suite.Caps: PathMTU, Encap, AsIs, Has)", b)
		}
	}
	if n < 20 {
		t.Errorf("%d suite files checked, want at least 20", n)
	}
}

// TestPlaceChecksCatchPlantedFiles: the rule finds each way a suite could
// know where it runs, and passes variants' names and probe kinds.
func TestPlaceChecksCatchPlantedFiles(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       string // "" for clean
	}{
		{"backend compared", `func f(o suite.Options) int { if o.Backend == "vxlan" { return 1450 }; return 1500 }`, `names a backend: "vxlan"`},
		{"backend in a message", `var m = "run it on a host-gw lab"`, `names a backend: "run it on a host-gw lab"`},
		{"backend in a case", "func f(b string) bool { switch b { case `geneve`: return true }; return false }", "names a backend: `geneve`"},
		{"kind constant", `func f(c suite.Caps) bool { return c.AsIs || suite.KindKubernetes == "" }`, "kind: KindKubernetes"},
		{"kind compared", `func f(c suite.Caps) bool { return c.Kind == "kubernetes" }`, "compares a .Kind"},
		{"kind switched", `func f(c suite.Caps) int { switch c.Kind { case "lab": return 1 }; return 0 }`, "switches on a .Kind"},
		{"variant names", `const (VariantVXLAN = "vxlan"; VariantVXLANInherit = "vxlan-inherit")`, ""},
		{"probe kinds", `func f(s probe.Spec) bool { switch s.Kind { case probe.KindUDP: }; return s.Kind == probe.KindTCP }`, ""},
		{"caps", `func f(c suite.Caps) bool { return c.Encap == suite.EncapVXLAN && c.PathMTU < 1500 }`, ""},
		{"words", `var m = "vxlanish; the host-gateway"`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad, err := placeChecks("planted.go", []byte("package planted\n"+c.body+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.want == "" && len(bad) > 0:
				t.Errorf("clean source flagged: %v", bad)
			case c.want != "" && (len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), c.want)):
				t.Errorf("findings %v, want one with %q", bad, c.want)
			}
		})
	}
}
