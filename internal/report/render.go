package report

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"
)

//go:embed templates/*.tmpl
var templateFS embed.FS

// Templates returns the package's templates (the "chart" SVG and the
// report page's "report-body" and "report-style"), parsed with their
// helper functions, for pages that embed reports (the dashboard). Each
// call parses afresh, so callers may add their own templates to it.
func Templates() (*template.Template, error) {
	t, err := template.New("report").Funcs(Funcs()).ParseFS(templateFS, "templates/*.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse report templates: %w", err)
	}
	return t, nil
}

// Funcs are the helpers the templates use.
func Funcs() template.FuncMap {
	return template.FuncMap{
		"f":         func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
		"add":       func(a, b float64) float64 { return a + b },
		"half":      func(v float64) float64 { return v / 2 },
		"neg":       func(v float64) float64 { return -v },
		"pct":       func(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) },
		"fmtv":      Format,
		"slug":      func(s string) string { return strings.ReplaceAll(strings.ToLower(s), " ", "-") },
		"envLines":  EnvironmentLines,
		"hasPrefix": strings.HasPrefix,
		"dict": func(kv ...any) (map[string]any, error) {
			if len(kv)%2 != 0 {
				return nil, fmt.Errorf("dict: odd number of arguments")
			}
			m := map[string]any{}
			for i := 0; i < len(kv); i += 2 {
				k, ok := kv[i].(string)
				if !ok {
					return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
				}
				m[k] = kv[i+1]
			}
			return m, nil
		},
	}
}

// WriteSVG writes one chart as a standalone SVG document.
func WriteSVG(w io.Writer, c *Chart) error {
	t, err := Templates()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "chart", c); err != nil {
		return fmt.Errorf("render chart %s: %w", c.ID, err)
	}
	b.WriteString("\n")
	_, err = w.Write(b.Bytes())
	return err
}

// View is what the report templates render: the report with its table
// and charts built.
type View struct {
	R *Report
	// Sections are the suite's own tables (none for a report whose
	// tables are the pivot of every figure).
	Sections []Section
	Key      Table // the key figures
	Table    Table // every figure
	Charts   []*Chart
}

// KeyMetrics are the figures a report's main table shows: what the source
// studies tabulated (throughput and CPU at both ends, loss, jitter,
// latency quantiles).
var keyMetrics = []string{
	"throughput_bps.sender", "throughput_bps.receiver", "cpu_pct.sender", "cpu_pct.receiver", "retransmits",
	"udp.throughput_bps.receiver", "loss_pct", "jitter_ms", "latency_ms.p99",
	"rtt_ms.p50", "rtt_ms.p99", "ping.rtt_ms.avg", "ping.loss_pct",
	"stamp.rtt_ms.p50", "stamp.forward.delay_ms.p50", "stamp.reverse.delay_ms.p50",
	"stamp.forward.loss_pct", "stamp.reverse.loss_pct", "stamp.forward.dscp_received", "stamp.reverse.dscp_received",
}

// KeyMetrics returns the names of the figures the main table shows.
func KeyMetrics() []string { return append([]string(nil), keyMetrics...) }

// NewView builds the table and charts of r.
func NewView(r *Report) View {
	key := BuildTable(r.Rows, TableOptions{Metrics: keyMetrics, Present: r.Present})
	if len(key.Lines) == 0 {
		key = BuildTable(r.Rows, TableOptions{Present: r.Present})
	}
	v := View{R: r, Key: key, Table: BuildTable(r.Rows, TableOptions{Present: r.Present}), Charts: r.Charts()}
	if len(r.Present.Tables) > 0 {
		v.Sections = r.Sections()
	}
	return v
}

// WriteHTML writes the report as one self-contained HTML page.
func (r *Report) WriteHTML(w io.Writer) error {
	t, err := Templates()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "report-page", NewView(r)); err != nil {
		return fmt.Errorf("render report %s: %w", r.RunID, err)
	}
	_, err = w.Write(b.Bytes())
	return err
}
