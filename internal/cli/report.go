package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/bundle"
	"github.com/cnperf/cnperf/internal/report"
)

// reportServer holds the flags of the verbs that read runs from a server:
// the server's, and a bound on the whole read.
type reportServer struct {
	serverFlags
	timeout time.Duration
}

func (f *reportServer) register(cmd *cobra.Command) {
	f.serverFlags.register(cmd)
	cmd.Flags().DurationVar(&f.timeout, "timeout", time.Minute, "bound on reading the runs from the server, all calls together")
}

// fetchReport reads a run and, unless only is set, the other runs of its
// suite invocation (phases, backends), and builds their report.
func fetchReport(ctx context.Context, c *client.Client, id string, only bool) (*report.Report, error) {
	run, err := c.GetRun(ctx, id)
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
			return nil, fmt.Errorf("run %s: no such run on %s", id, c.Base())
		}
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	runs := []api.Run{run}
	if !only {
		if p, ok := report.RunParams(run); ok && p.Invocation != "" {
			listing, err := listAllRuns(ctx, c)
			if err != nil {
				return nil, err
			}
			runs = nil
			for _, o := range report.Invocation(run, listing) {
				if o.ID != run.ID {
					if o, err = c.GetRun(ctx, o.ID); err != nil {
						return nil, fmt.Errorf("run %s of the same suite run: %w", o.ID, err)
					}
				}
				runs = append(runs, o)
			}
		}
	}
	rep, err := report.FromRuns(suites(), runs...)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	rep.RunID = id
	return rep, nil
}

func listAllRuns(ctx context.Context, c *client.Client) ([]api.Run, error) {
	var out []api.Run
	after := ""
	for len(out) < 100000 {
		p, err := c.ListRuns(ctx, 1000, after)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		out = append(out, p.Runs...)
		if p.NextAfter == "" || len(p.Runs) == 0 {
			break
		}
		after = p.NextAfter
	}
	return out, nil
}

// writeFileAtomic writes via a temporary file and a rename, so a failed
// write leaves no half-made file.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(dirOf(path), ".cnperf-report-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if path[i] == '/' {
			if i == 0 {
				return "/"
			}
			return path[:i]
		}
	}
	return "."
}

// reportWriters are the formats of cnperf report.
var reportWriters = map[string]func(*report.Report, io.Writer) error{
	"text":   (*report.Report).WriteText,
	"md":     (*report.Report).WriteMarkdown,
	"csv":    (*report.Report).WriteCSV,
	"json":   (*report.Report).WriteJSON,
	"iperf3": (*report.Report).WriteIperf3,
	"html":   (*report.Report).WriteHTML,
	"yaml":   writeReportYAML,
}

// writeReportYAML writes the report's JSON document as YAML.
func writeReportYAML(r *report.Report, w io.Writer) error {
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(b.Bytes())
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	_, err = w.Write(y)
	return err
}

// reportOutputs maps kubectl's -o values (and the --format names) to the
// report's formats.
var reportOutputs = map[string]string{
	"table": "text", "wide": "text", "text": "text", "json": "json", "yaml": "yaml",
	"csv": "csv", "markdown": "md", "md": "md", "iperf3": "iperf3", "html": "html",
}

// reportFormat resolves --format and -o: -o names a format as kubectl's
// does; a value that names none is a file, as -o was before (now
// --output-file).
func reportFormat(cmd *cobra.Command, format, output, outputFile string, errw io.Writer) (string, string, error) {
	if output != "" {
		o, ok := reportOutputs[output]
		if !ok {
			if outputFile != "" {
				return "", "", fmt.Errorf("-o %q: want one of table, wide, json, yaml, csv, markdown, iperf3, html", output)
			}
			fmt.Fprintf(errw, "note: -o %s names no format; writing to the file %s (say --output-file %s)\n", output, output, output)
			return format, output, nil
		}
		if cmd.Flags().Changed("format") && reportOutputs[format] != o {
			return "", "", fmt.Errorf("--format %s and -o %s: give one", format, output)
		}
		return o, outputFile, nil
	}
	return format, outputFile, nil
}

// newReportCommand is `cnperf report`; with a cluster (kubectl cnperf)
// it reads the run from cnperf's server there.
func newReportCommand(_ *globalOptions, st Streams, cluster *k8sFlags) *cobra.Command {
	var srv reportServer
	var htmlFile, format, output, outputFile string
	var only bool
	cmd := &cobra.Command{
		Use:   "report RUN_ID | BUNDLE.json",
		Short: "Show a stored run's results as a table, markdown, CSV, JSON, iperf3 JSON or an HTML page with charts",
		Long: `Read a run from the server and render its report. The report covers the
whole suite run the run belongs to (all its phases, and every backend of a
cni-compare), unless --only-this-run. A run still in progress is shown
with its progress and the figures measured so far.

  cnperf report RUN_ID                       # table on the terminal
  cnperf report RUN_ID --html report.html    # self-contained page with SVG charts
  cnperf report RUN_ID --format iperf3       # iperf3 --json: one document, an array for several
  cnperf report lab.json                     # a study bundle (cnperf evaluate --out): no server`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f, ok := reportOutputs[format]; ok && format != "iperf3" && format != "html" {
				format = f // --format markdown, yaml, table as -o has them
			}
			format, output, err := reportFormat(cmd, format, output, outputFile, st.Err)
			if err != nil {
				return err
			}
			w, ok := reportWriters[format]
			if !ok {
				return fmt.Errorf("--format %q: want text, md, csv, json, yaml, iperf3 or html", format)
			}
			if format == "html" && output == "" && htmlFile == "" {
				return errors.New("--format html writes a page: give --html FILE or --output-file FILE")
			}
			if bundle.IsBundle(args[0]) {
				return reportBundle(st, args[0], format, htmlFile, output)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), srv.timeout)
			defer cancel()
			c, done, err := srv.connect(ctx)
			if err != nil {
				return err
			}
			defer done()
			rep, err := fetchReport(ctx, c, args[0], only)
			if err != nil {
				return err
			}
			if htmlFile != "" {
				if err := writeFileAtomic(htmlFile, rep.WriteHTML); err != nil {
					return err
				}
				fmt.Fprintf(st.Err, "wrote %s\n", htmlFile)
				if !cmd.Flags().Changed("format") {
					return nil
				}
			}
			if output != "" {
				return writeFileAtomic(output, func(f io.Writer) error { return w(rep, f) })
			}
			return w(rep, st.Out)
		},
	}
	srv.register(cmd)
	if cluster != nil {
		srv.onCluster(cmd, cluster)
	}
	fl := cmd.Flags()
	fl.StringVar(&htmlFile, "html", "", "write the HTML report (charts included) to FILE")
	fl.StringVar(&format, "format", "text", "output format: text, md, csv, json, yaml, iperf3, html")
	fl.StringVarP(&output, "output", "o", "", "output format as kubectl's -o: table, wide, json, yaml, csv, markdown, iperf3, html (the --format choices)")
	fl.StringVar(&outputFile, "output-file", "", "write the output to FILE instead of standard output")
	fl.BoolVar(&only, "only-this-run", false, "report this run alone, not the other phases or backends of its suite run")
	return cmd
}

// reportBundle renders a study bundle as a run is rendered: the sheet,
// then every suite run's report.
func reportBundle(st Streams, path, format, htmlFile, output string) error {
	b, err := bundle.Read(path)
	if err != nil {
		return err
	}
	writers := map[string]func(io.Writer) error{
		"text": func(w io.Writer) error { return b.WriteText(w, suites(), true) },
		"md":   func(w io.Writer) error { return b.WriteMarkdown(w, suites()) },
		"json": b.Write,
		"html": func(w io.Writer) error { return b.WriteHTML(w, suites()) },
	}
	w, ok := writers[format]
	if !ok {
		return fmt.Errorf("--format %q: a bundle renders as text, md, json or html", format)
	}
	if htmlFile != "" {
		if err := writeFileAtomic(htmlFile, writers["html"]); err != nil {
			return err
		}
		fmt.Fprintf(st.Err, "wrote %s\n", htmlFile)
		if format == "text" {
			return nil
		}
	}
	if output != "" {
		return writeFileAtomic(output, w)
	}
	return w(st.Out)
}
