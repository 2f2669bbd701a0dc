package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/suite/cniqos"
)

// TestCNIQoSTableFollowsTheRecord: qos.md's table of verified CNI QoS
// features is the one the real-cluster test's record
// (cni-qos-verified.json) makes; an edit of either alone fails here.
func TestCNIQoSTableFollowsTheRecord(t *testing.T) {
	root := repoRoot(t)
	rec, err := cniqos.ReadVerified(filepath.Join(root, "docs", "cni-qos-verified.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) == 0 {
		t.Fatal("docs/cni-qos-verified.json holds no rows")
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "qos.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := cniqos.SetTable(string(doc), cniqos.VerifiedTable(rec))
	if err != nil {
		t.Fatalf("qos.md: %v", err)
	}
	if want != string(doc) {
		_, got, _ := strings.Cut(string(doc), cniqos.TableBegin)
		got, _, _ = strings.Cut(got, cniqos.TableEnd)
		t.Errorf("qos.md's cni-qos table differs from docs/cni-qos-verified.json (the real-cluster test rewrites both):\n%s\nwant:\n%s", got, cniqos.VerifiedTable(rec))
	}
}
