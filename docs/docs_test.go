package docs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/suite/cniqos"
)

// repoRoot is the module's root: the directory above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod above docs/: %v", err)
	}
	return root
}

// modulePackages lists the module's packages as `go list ./...` does,
// relative to the module path.
func modulePackages(t *testing.T, root string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v: %s", err, stderr.String())
	}
	modCmd := exec.CommandContext(ctx, goBin, "list", "-m")
	modCmd.Dir = root
	mod, err := modCmd.Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	prefix := strings.TrimSpace(string(mod)) + "/"
	var pkgs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkgs = append(pkgs, strings.TrimPrefix(line, prefix))
	}
	return pkgs
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// mapSection returns the text of ARCHITECTURE.md's "## Package map"
// section.
func mapSection(t *testing.T, doc string) string {
	t.Helper()
	i := strings.Index(doc, "\n## Package map\n")
	if i < 0 {
		t.Fatal(`ARCHITECTURE.md has no "## Package map" section`)
	}
	rest := doc[i+1:]
	if j := strings.Index(rest[3:], "\n## "); j >= 0 {
		rest = rest[:j+3]
	}
	return rest
}

// missingFromMap names the packages the map does not name as a code span
// (`internal/probe/tcp`).
func missingFromMap(section string, pkgs []string) []string {
	named := map[string]bool{}
	for _, m := range codeSpan.FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	var missing []string
	for _, p := range pkgs {
		if !named[p] {
			missing = append(missing, p)
		}
	}
	return missing
}

func TestArchitectureMapsEveryPackage(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := modulePackages(t, root)
	if len(pkgs) < 10 {
		t.Fatalf("go list ./... gave %d packages: %v", len(pkgs), pkgs)
	}
	if missing := missingFromMap(mapSection(t, string(doc)), pkgs); len(missing) > 0 {
		t.Errorf("docs/ARCHITECTURE.md's package map does not name these packages of go list ./... (add a row with each path in backticks):\n  %s",
			strings.Join(missing, "\n  "))
	}
}

func TestMissingFromMapFindsAnUnnamedPackage(t *testing.T) {
	section := "| `internal/a`, `internal/b` | things |\n| internal/c | not a code span |\n"
	got := missingFromMap(section, []string{"internal/a", "internal/b", "internal/c", "internal/d"})
	want := []string{"internal/c", "internal/d"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("missingFromMap = %v, want %v", got, want)
	}
}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	upPath     = regexp.MustCompile(`(?:^|[\s(\x60"'])((?:\.\./)+[A-Za-z0-9_.][A-Za-z0-9_./-]*)`)
	fencedCode = regexp.MustCompile("(?s)```.*?```")
)

// docFiles are the documents checked: README.md, docs/*.md and the
// benchmarks' READMEs.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"docs/*.md", "bench/README.md", "bench/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	files = append(files, filepath.Join(root, "README.md"))
	sort.Strings(files)
	return files
}

// linkProblems lists what is wrong with the links of one document at path
// (inside root): a link with a scheme or one that leaves root, a linked
// file that does not exist, an anchor no heading of its target makes, and
// a path written out in the text (../x) that leaves root.
func linkProblems(root, path, text string) []string {
	var problems []string
	dir := filepath.Dir(path)
	inside := func(p string) bool {
		rel, err := filepath.Rel(root, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			problems = append(problems, "links outside the repository: "+target)
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		abs := path
		if file != "" {
			abs = filepath.Join(dir, file)
		}
		if !inside(abs) {
			problems = append(problems, "links outside the repository: "+target)
			continue
		}
		if file == "" {
			if !headingAnchors(text)[anchor] {
				problems = append(problems, "links to a heading that does not exist: "+target)
			}
			continue
		}
		st, err := os.Stat(abs)
		if err != nil {
			problems = append(problems, "links to a missing file: "+target)
			continue
		}
		if anchor == "" {
			continue
		}
		if st.IsDir() || !strings.HasSuffix(abs, ".md") {
			problems = append(problems, "links to an anchor in a non-Markdown file: "+target)
			continue
		}
		b, err := os.ReadFile(abs)
		if err != nil {
			problems = append(problems, "cannot read "+target+": "+err.Error())
			continue
		}
		if !headingAnchors(string(b))[anchor] {
			problems = append(problems, "links to a heading that does not exist: "+target)
		}
	}
	for _, m := range upPath.FindAllStringSubmatch(fencedCode.ReplaceAllString(text, ""), -1) {
		abs := filepath.Join(dir, m[1])
		if !inside(abs) {
			problems = append(problems, "names a path outside the repository: "+m[1])
		} else if _, err := os.Stat(abs); err != nil {
			problems = append(problems, "names a path that does not exist: "+m[1])
		}
	}
	return problems
}

// headingAnchors returns the anchors GitHub makes of a document's
// headings: lower case, punctuation dropped, spaces turned into hyphens.
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	for _, line := range strings.Split(fencedCode.ReplaceAllString(doc, ""), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r > 127 && isLetterOrDigit(r):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

func isLetterOrDigit(r rune) bool {
	return strings.ContainsRune("àáâäçèéêëìíîïñòóôöùúûüß", r)
}

func TestDocsLinkNothingOutsideTheRepository(t *testing.T) {
	root := repoRoot(t)
	for _, path := range docFiles(t, root) {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, p := range linkProblems(root, path, string(text)) {
			t.Errorf("%s %s", rel, p)
		}
	}
}

func TestLinkProblemsFindsBadLinks(t *testing.T) {
	root := repoRoot(t)
	path := filepath.Join(root, "docs", "x.md")
	text := "# A title, with `code`\n" +
		"[ok](ARCHITECTURE.md) [self](#a-title-with-code) [up](../README.md)\n" +
		"[web](https://example.com/) [out](../../elsewhere/DESIGN.md)\n" +
		"[gone](nosuch.md) [anchor](ARCHITECTURE.md#no-such-heading)\n" +
		"see ../shared/DESIGN.md for more\n"
	got := linkProblems(root, path, text)
	want := []string{
		"links outside the repository: https://example.com/",
		"links outside the repository: ../../elsewhere/DESIGN.md",
		"links to a missing file: nosuch.md",
		"links to a heading that does not exist: ARCHITECTURE.md#no-such-heading",
		"names a path outside the repository: ../../elsewhere/DESIGN.md",
		"names a path that does not exist: ../shared/DESIGN.md",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("linkProblems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestReadmeKeepsTheTestCommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("make test")) {
		t.Error("README.md no longer says how to run the tests (make test; .ci/run calls it)")
	}
}

// maxWords bounds docs/*.md as `wc -w docs/*.md` counts, less the table
// the real-cluster test writes into qos.md (its record of what each CNI's
// QoS did, issue 37's table; it grows with the CNIs and features, not
// with prose): the docs say what each part does, how to use it and why;
// results and investigations do not belong here (benchmarks print their
// own).
const maxWords = 20000

// prose is doc without the generated cni-qos table (TestCNIQoSTableFollowsTheRecord
// holds that table to its record).
func prose(doc string) string {
	before, rest, ok := strings.Cut(doc, cniqos.TableBegin)
	if !ok {
		return doc
	}
	_, after, ok := strings.Cut(rest, cniqos.TableEnd)
	if !ok {
		return doc
	}
	return before + after
}

func TestDocsStayShort(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += len(strings.Fields(prose(string(b))))
	}
	if total > maxWords {
		t.Errorf("docs/*.md hold %d words, over %d: condense (state decisions as decisions; leave dated figures and investigation logs to git and the benchmarks' output)", total, maxWords)
	}
}

func TestProseLeavesOutTheGeneratedTable(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"a b\n" + cniqos.TableBegin + "\n| x | y |\n" + cniqos.TableEnd + "\nc\n", "a b\n\nc\n"},
		{"no table here", "no table here"},
		{"a " + cniqos.TableBegin + " never ended", "a " + cniqos.TableBegin + " never ended"},
	} {
		if got := prose(tc.doc); got != tc.want {
			t.Errorf("prose(%q) = %q, want %q", tc.doc, got, tc.want)
		}
	}
}
