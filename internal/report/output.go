package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/suite"
)

// Output is what a suite run prints: the rows with the runs they came from.
type Output struct {
	// RunID is the first run's id; RunIDs lists every run (one per phase,
	// and one per backend of a cni-compare in the lab).
	RunID   string        `json:"run_id"`
	RunIDs  []string      `json:"run_ids"`
	Suite   string        `json:"suite"`
	Options suite.Options `json:"options"`
	Rows    []suite.Row   `json:"rows"`
	// Environment is what the run ran on (the first report's).
	Environment *hostinfo.Environment `json:"environment,omitempty"`
	// Checks are the SLO evaluations, when objectives were given.
	Checks []suite.Check `json:"slo,omitempty"`
	// Outcomes are the measurements behind the rows (for reports' charts).
	Outcomes []suite.Outcome `json:"-"`
}

// NewOutput builds the output of reports of one suite (several for a
// cni-compare over backends), with the overhead of each pod path set.
func NewOutput(reps ...suite.Report) Output {
	var out Output
	for _, r := range reps {
		out.Suite, out.Options = r.Suite, r.Options
		out.RunIDs = append(out.RunIDs, r.RunIDs...)
		out.Rows = append(out.Rows, r.Rows...)
		out.Outcomes = append(out.Outcomes, r.Outcomes...)
		if out.Environment == nil {
			out.Environment = r.Environment
		}
	}
	if len(out.RunIDs) > 0 {
		out.RunID = out.RunIDs[0]
	}
	out.Options.Backend = ""
	suite.SetOverhead(out.Rows)
	return out
}

// WriteJSON writes the output as indented JSON.
func (o Output) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(o)
}

// WriteCSV writes the rows as `cnperf report RUN_ID --format csv` does:
// one figure per line (Report.WriteCSV), so a run's CSV is the same
// whether printed as it ends or read back from the server later.
func (o Output) WriteCSV(w io.Writer) error {
	return (&Report{RunID: o.RunID, Suite: o.Suite, Rows: o.Rows}).WriteCSV(w)
}

// column is one figure of a table: its heading and how to show it.
type column struct {
	head   string
	metric string
	scale  float64 // divide by
	prec   int
}

// baselineColumns are Table 2 of the source study (communication mode, TCP
// bandwidth, average RTT) with UDP and the rr RTT beside them.
var baselineColumns = []column{
	{"TCP Mbit/s", "throughput_bps.receiver", 1e6, 0},
	{"PING RTT ms", "ping.rtt_ms.avg", 1, 3},
	{"RR RTT ms", "rtt_ms.avg", 1, 3},
	{"UDP Mbit/s", "udp.throughput_bps.receiver", 1e6, 0},
	{"UDP LOSS %", "loss_pct", 1, 2},
}

// stampColumns follow baselineColumns when a row has STAMP figures (the
// baseline's --set stamp=true): round trip, one-way delay and loss per
// direction, and the DSCP the reflector saw and the reply came back with.
var stampColumns = []column{
	{"STAMP RTT ms", "stamp.rtt_ms.p50", 1, 3},
	{"FWD ms", "stamp.forward.delay_ms.p50", 1, 3},
	{"REV ms", "stamp.reverse.delay_ms.p50", 1, 3},
	{"FWD LOSS %", "stamp.forward.loss_pct", 1, 2},
	{"REV LOSS %", "stamp.reverse.loss_pct", 1, 2},
	{"DSCP FWD", "stamp.forward.dscp_received", 1, 0},
	{"DSCP REV", "stamp.reverse.dscp_received", 1, 0},
}

// compareMeasures are the rows of the backend comparison of the Calico and
// Flannel studies, per connection.
var compareMeasures = []column{
	{"Bitrate (sender)", "throughput_bps.sender", 1e9, 2},
	{"Transfer (sender)", "bytes.sender", 1 << 30, 2},
	{"CPU utilisation (sender)", "cpu_pct.sender", 1, 1},
	{"Bitrate (receiver)", "throughput_bps.receiver", 1e9, 2},
	{"Transfer (receiver)", "bytes.receiver", 1 << 30, 2},
	{"CPU utilisation (receiver)", "cpu_pct.receiver", 1, 1},
}

var compareUnits = map[string]string{
	"throughput_bps.sender": " Gbit/s", "throughput_bps.receiver": " Gbit/s",
	"bytes.sender": " GiB", "bytes.receiver": " GiB",
	"cpu_pct.sender": " %", "cpu_pct.receiver": " %",
}

// cell shows a figure as median (min-max), or "-" when the row lacks it.
func cell(r suite.Row, c column, unit string) string {
	v, ok := r.Median[c.metric]
	if !ok || math.IsNaN(v) {
		return "-"
	}
	f := func(x float64) string { return strconv.FormatFloat(x/c.scale, 'f', c.prec, 64) }
	s := f(v) + unit
	if r.Repetitions > 1 {
		s += " (" + f(r.Min[c.metric]) + "-" + f(r.Max[c.metric]) + ")"
	}
	return s
}

// backends returns the rows' backends in order of appearance.
func (o Output) backends() []string {
	var bs []string
	for _, r := range o.Rows {
		if !slices.Contains(bs, r.Backend) {
			bs = append(bs, r.Backend)
		}
	}
	return bs
}

// header says what the table shows.
func (o Output) header() string {
	runs := strings.Join(o.RunIDs, ", ")
	if runs == "" {
		runs = "none"
	}
	return fmt.Sprintf("%s: run %s; %d repetition(s) of %v per measurement; median (min-max)",
		o.Suite, runs, o.Options.Repeat, o.Options.Time.Round(time.Millisecond))
}

// baselineTable returns the heading and lines of the baseline table of one
// backend.
func (o Output) baselineTable(backend string) ([]string, [][]string) {
	head := []string{"CONNECTION", "SRC -> DST"}
	cols := baselineColumns
	for _, r := range o.Rows {
		if _, ok := r.Median[stampColumns[0].metric]; ok && r.Backend == backend {
			cols = append(slices.Clip(cols), stampColumns...)
			break
		}
	}
	for _, c := range cols {
		head = append(head, c.head)
	}
	head = append(head, "VS NODE-NODE")
	var lines [][]string
	for _, r := range o.Rows {
		if r.Backend != backend {
			continue
		}
		line := []string{r.Connection, r.Src + " -> " + r.Dst}
		for _, c := range cols {
			line = append(line, cell(r, c, ""))
		}
		ov := "-"
		if r.OverheadPct != nil {
			ov = fmt.Sprintf("%+.1f %%", -*r.OverheadPct)
		} else if r.Connection == suite.NodeNode {
			ov = "reference"
		}
		if so := r.ServiceOverhead; so != nil && so.TCPPct != nil {
			ov += fmt.Sprintf(" (vs cross node: TCP %+.1f %%", -*so.TCPPct)
			if so.RRAddedMs != nil {
				ov += fmt.Sprintf(", RR %+.1f µs", 1000**so.RRAddedMs)
			}
			ov += ")"
		}
		lines = append(lines, append(line, ov))
	}
	return head, lines
}

// compareTable returns the backend comparison: per connection, per
// measurement, one column per backend.
func (o Output) compareTable() ([]string, [][]string) {
	bs := o.backends()
	head := append([]string{"CONNECTION", "MEASUREMENT"}, bs...)
	var lines [][]string
	for _, conn := range suite.ConnectionOrder {
		byBackend := map[string]suite.Row{}
		label := conn
		for _, r := range o.Rows {
			if r.Connection == conn {
				byBackend[r.Backend] = r
				label = fmt.Sprintf("%s (%s -> %s)", conn, r.Src, r.Dst)
			}
		}
		if len(byBackend) == 0 {
			continue
		}
		for i, m := range compareMeasures {
			first := ""
			if i == 0 {
				first = label
			}
			line := []string{first, m.head}
			for _, b := range bs {
				r, ok := byBackend[b]
				if !ok {
					line = append(line, "-")
					continue
				}
				line = append(line, cell(r, m, compareUnits[m.metric]))
			}
			lines = append(lines, line)
		}
	}
	return head, lines
}

// errorsOf lists the rows' step errors.
func (o Output) errorsOf() []string {
	var out []string
	for _, r := range o.Rows {
		for _, e := range r.Errors {
			out = append(out, fmt.Sprintf("%s %s: %s", r.Backend, r.Connection, e))
		}
	}
	return out
}

// WriteTable writes the output as terminal tables: the baseline table per
// backend (with the overhead of each pod path against node-node) and, when
// there are several backends or the suite is cni-compare, the comparison
// table; then failed steps and SLO checks.
func (o Output) WriteTable(w io.Writer) error {
	return o.write(w, false)
}

// WriteMarkdown writes the same tables as GitHub-flavoured Markdown.
func (o Output) WriteMarkdown(w io.Writer) error {
	return o.write(w, true)
}

func (o Output) write(w io.Writer, md bool) error {
	var b strings.Builder
	b.WriteString(o.header() + "\n")
	for _, l := range EnvironmentLines(o.Environment) {
		if md {
			l = "> " + strings.TrimSpace(l)
		}
		b.WriteString(l + "\n")
	}
	for _, be := range o.backends() {
		title := "backend " + be
		if be == "" {
			title = "backend not named"
		}
		b.WriteString("\n")
		if md {
			b.WriteString("### " + title + "\n\n")
		} else {
			b.WriteString(title + "\n")
		}
		head, lines := o.baselineTable(be)
		writeGrid(&b, head, lines, md)
	}
	if o.Suite == "cni-compare" || len(o.backends()) > 1 {
		b.WriteString("\n")
		if md {
			b.WriteString("### backends compared\n\n")
		} else {
			b.WriteString("backends compared\n")
		}
		head, lines := o.compareTable()
		writeGrid(&b, head, lines, md)
	}
	if errs := o.errorsOf(); len(errs) > 0 {
		b.WriteString("\nfailed steps:\n")
		for _, e := range errs {
			b.WriteString("  " + e + "\n")
		}
	}
	if len(o.Checks) > 0 {
		b.WriteString("\nSLO:\n")
		for _, c := range o.Checks {
			b.WriteString("  " + c.Line() + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeGrid writes a table, aligned for a terminal or as Markdown.
func writeGrid(b *strings.Builder, head []string, lines [][]string, md bool) {
	if md {
		esc := func(cells []string) string {
			out := make([]string, len(cells))
			for i, c := range cells {
				out[i] = strings.ReplaceAll(c, "|", `\|`)
			}
			return "| " + strings.Join(out, " | ") + " |\n"
		}
		b.WriteString(esc(head))
		sep := make([]string, len(head))
		for i := range sep {
			sep[i] = "---"
		}
		b.WriteString("|" + strings.Join(sep, "|") + "|\n")
		for _, l := range lines {
			b.WriteString(esc(l))
		}
		return
	}
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, l := range lines {
		fmt.Fprintln(tw, strings.Join(l, "\t"))
	}
	_ = tw.Flush()
}

// WriteSuiteTable writes out with the suite's own table: a header with
// the runs, the table, the failed SLO checks.
func WriteSuiteTable(w io.Writer, out Output, tw suite.TableWriter) error {
	if _, err := fmt.Fprintf(w, "%s: %d runs (%s); %d repetitions of %v; median over repetitions\n\n", out.Suite, len(out.RunIDs),
		shortRuns(out.RunIDs), out.Options.Repeat, out.Options.Time); err != nil {
		return err
	}
	if err := tw.WriteTable(w, out.Rows); err != nil {
		return err
	}
	if len(out.Checks) > 0 {
		fmt.Fprintln(w, "\nSLO:")
		for _, c := range out.Checks {
			if _, err := fmt.Fprintln(w, "  "+c.Line()); err != nil {
				return err
			}
		}
	}
	return nil
}

// shortRuns names the first and last run of many.
func shortRuns(ids []string) string {
	switch len(ids) {
	case 0:
		return "none"
	case 1, 2:
		return strings.Join(ids, ", ")
	}
	return ids[0] + " … " + ids[len(ids)-1]
}

// Report is the output as a report (for its HTML page): the suite's own
// rows, overheads included, its charts as p asks, and the measurements
// behind them.
func (o Output) Report(p suite.Presentation) *Report {
	rep := FromOutcomes(o.RunID, o.Suite, o.Outcomes)
	rep.Rows = o.Rows
	rep.Present = p
	rep.AddSuiteCharts()
	rep.Status = api.RunSucceeded
	rep.Environment = o.Environment
	rep.Params = map[string]string{"time": o.Options.Time.String(), "repeat": fmt.Sprint(o.Options.Repeat), "runs": fmt.Sprint(len(o.RunIDs))}
	return rep
}
