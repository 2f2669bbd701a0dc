package web_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

var (
	svgSizeRe = regexp.MustCompile(`<svg [^>]*id="coverage"[^>]*width="([0-9.]+)" height="([0-9.]+)"`)
	cellRe    = regexp.MustCompile(`<g class="cell( marked)?"><rect x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="([0-9.]+)"[^>]*><title>([^<]*)</title>`)
)

// TestCoveragePage: the matrix page draws every ordered pair of 30 nodes
// (a matrix too large for the page's column) at a visible size inside
// the chart, scrolling instead of shrinking; each measured pair's age is
// in its cell, the overdue ones (never measured, or older than
// ?overdue=) outlined and counted; a bad overdue is a 400.
func TestCoveragePage(t *testing.T) {
	cl := newCluster(t, 0, 0)
	ctx := context.Background()
	const n = 30
	now := time.Now()
	node := func(i int) string { return fmt.Sprintf("node%02d", i) }
	want := 0 // overdue at 24h
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if i == j {
				continue
			}
			age := 2 * time.Hour
			switch {
			case i == 3: // node03's pairs out were never measured
				want++
				continue
			case j == 7: // into node07: 30 h ago
				age = 30 * time.Hour
				want++
			}
			p := store.MatrixPair{Src: node(i), Dst: node(j), Measure: "tcp", RunID: "r", MeasuredAt: now.Add(-age), Figures: `{"throughput_bps.receiver":1e9}`}
			if err := cl.St.RecordMatrixPair(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	hc := browserlessClient(t)
	login(t, hc, cl.URL)
	code, body := get(t, hc, cl.URL+"/matrix")
	if code != http.StatusOK {
		t.Fatalf("/matrix: %d\n%s", code, body)
	}
	if s := fmt.Sprintf("%d of %d ordered pairs measured", n*(n-1)-(n-1), n*(n-1)); !strings.Contains(body, s) || !strings.Contains(body, fmt.Sprintf("<b>%d overdue</b>", want)) {
		t.Errorf("summary lacks %q or %d overdue", s, want)
	}
	m := svgSizeRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no coverage heat map on the page")
	}
	w, _ := strconv.ParseFloat(m[1], 64)
	h, _ := strconv.ParseFloat(m[2], 64)
	if !strings.Contains(body, `<figure class="wide"><svg`) {
		t.Error("the heat map of 30 nodes is not a wide (scrolling) figure")
	}
	cells, marked := 0, 0
	for _, c := range cellRe.FindAllStringSubmatch(body, -1) {
		cells++
		x, _ := strconv.ParseFloat(c[2], 64)
		y, _ := strconv.ParseFloat(c[3], 64)
		cw, _ := strconv.ParseFloat(c[4], 64)
		ch, _ := strconv.ParseFloat(c[5], 64)
		if x < 0 || y < 0 || x+cw > w || y+ch > h || cw < 12 || ch < 12 {
			t.Fatalf("cell %s at %.0f,%.0f size %.0fx%.0f: outside the %.0fx%.0f chart or too small to see", c[6], x, y, cw, ch, w, h)
		}
		title := c[6]
		if c[1] != "" {
			marked++
			if !strings.Contains(title, "overdue") {
				t.Errorf("outlined cell %q does not say it is overdue", title)
			}
		}
		if strings.HasPrefix(title, "node05 → node07") && !strings.Contains(title, ": 30.0 h") ||
			strings.HasPrefix(title, "node05 → node06") && !strings.Contains(title, ": 2.00 h") {
			t.Errorf("cell %q does not show its age", title)
		}
	}
	if cells != n*n || marked != want {
		t.Errorf("%d cells, %d outlined; want %d and %d", cells, marked, n*n, want)
	}
	if !strings.Contains(body, `<tr class="overdue-pair"><td>node03</td>`) {
		t.Error("the never-measured pairs of node03 are not listed")
	}
	// A later threshold leaves only the never-measured pairs overdue.
	if _, body := get(t, hc, cl.URL+"/matrix?overdue=48h"); !strings.Contains(body, fmt.Sprintf("<b>%d overdue</b>", n-1)) {
		t.Errorf("overdue=48h: want %d overdue", n-1)
	}
	if code, _ := get(t, hc, cl.URL+"/matrix?overdue=soon"); code != http.StatusBadRequest {
		t.Errorf("overdue=soon: %d, want 400", code)
	}
}
