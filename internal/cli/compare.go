package cli

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/bundle"
	"github.com/cnperf/cnperf/internal/evaluate"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/report"
)

// ExitRegression is the exit code of cnperf compare --fail-on-regression
// when a figure got worse beyond its run-to-run spread.
const ExitRegression = 3

// newCompareCommand is `cnperf compare`; with a cluster (kubectl cnperf)
// it reads the runs from cnperf's server there.
func newCompareCommand(_ *globalOptions, st Streams, cluster *k8sFlags) *cobra.Command {
	var srv reportServer
	var format string
	var out outputFlags
	var tolerance float64
	var failOn, only bool
	var by, ref string
	cmd := &cobra.Command{
		Use:   "compare RUN_A RUN_B [RUN...] | BUNDLE.json ... [RUN...]",
		Short: "Compare runs of one suite and flag figures that got worse beyond their run-to-run spread",
		Long: `Compare stored runs of one suite against the first (the reference). A figure
is flagged worse only when all its repetitions fall outside the reference's
min–max on the worse side and its median moved by more than --tolerance
percent: a difference inside the spread the repetitions showed is noise,
not a regression. Runs of different single backends (host-gw vs vxlan)
are compared connection by connection; two runs of one cni-compare (its
host-gw and vxlan runs) are compared with each other. --by FIELD pools the
runs by what they ran on (--by kernel, --by os_image, --by cni, --by
backend, ...; every run stores its environment) and compares the groups,
the first group being the reference.

Study bundles (files written by cnperf evaluate --out), any number, are
compared with no server: a column per bundle named by --by (default
cni,backend; a comma-separated list of the fields above), a line per
question and scope with each bundle's verdict and headline figure, and
the figure's ratio against the --ref column (default the first). A run
id among the files is read from the server and answered as the questions
its suite answers.

Exit status: 0, or 3 with --fail-on-regression when a figure got worse.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if o := out.format; o != "" {
				if f, ok := map[string]string{"table": "text", "wide": "text", "markdown": "md"}[o]; ok {
					o = f
				}
				if cmd.Flags().Changed("format") && format != o {
					return fmt.Errorf("--format %s and -o %s: give one", format, out.format)
				}
				format = o
			}
			if anyBundle(args) {
				return compareBundles(cmd.Context(), st, &srv, args, by, ref, format)
			}
			if len(args) < 2 || len(args) > 6 {
				return fmt.Errorf("compare takes 2 to 6 run ids, or bundle files in any number (got %d arguments)", len(args))
			}
			if ref != "" {
				return errors.New("--ref is for bundles; runs are compared against the first")
			}
			if format != "text" && format != "md" && format != "json" && format != "yaml" && format != "csv" {
				return fmt.Errorf("--format %q: want text, md, csv, json or yaml", format)
			}
			if tolerance <= 0 || tolerance >= 100 {
				return fmt.Errorf("--tolerance %v: want a percentage between 0 and 100", tolerance)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), srv.timeout)
			defer cancel()
			c, done, err := srv.connect(ctx)
			if err != nil {
				return err
			}
			defer done()
			// Runs of one suite invocation (the backends of one
			// cni-compare) are compared as they are; otherwise each run
			// stands for its whole invocation.
			if !only {
				invs := map[string]bool{}
				for _, id := range args {
					run, err := c.GetRun(ctx, id)
					if err != nil {
						break // fetchReport below says what is wrong
					}
					if p, ok := report.RunParams(run); ok && p.Invocation != "" {
						if invs[p.Invocation] {
							only = true
						}
						invs[p.Invocation] = true
					}
				}
			}
			var reps []*report.Report
			for _, id := range args {
				rep, err := fetchReport(ctx, c, id, only)
				if err != nil {
					return err
				}
				if !rep.Finished() {
					fmt.Fprintf(st.Err, "note: run %s is still in progress (%d/%d measurements): its figures are partial\n", id, rep.Progress.Done, rep.Progress.Total)
				}
				reps = append(reps, rep)
			}
			if by != "" {
				if reps, err = report.GroupBy(suites(), reps, by); err != nil {
					return err
				}
			}
			cmp, err := report.Compare(reps, report.CompareOptions{Tolerance: tolerance / 100})
			if err != nil {
				return err
			}
			switch format {
			case "md":
				err = cmp.Table().WriteMarkdown(st.Out)
			case "json", "yaml":
				_, err = (&outputFlags{format: format}).print(st.Out, cmp)
			case "csv":
				t := cmp.Table()
				cw := csv.NewWriter(st.Out)
				_ = cw.Write(t.Header)
				err = cw.WriteAll(t.Lines)
			default:
				err = cmp.WriteText(st.Out)
			}
			if err != nil {
				return err
			}
			if failOn && cmp.Worse > 0 {
				return &ExitError{Code: ExitRegression, Err: fmt.Errorf("%d figures got worse beyond their run-to-run spread", cmp.Worse)}
			}
			return nil
		},
	}
	srv.register(cmd)
	if cluster != nil {
		srv.onCluster(cmd, cluster)
	}
	fl := cmd.Flags()
	fl.StringVar(&format, "format", "text", "output format: text, md, csv, json, yaml")
	out.registerOutput(cmd)
	fl.Float64Var(&tolerance, "tolerance", 5, "percent the median must also move by to be flagged")
	fl.BoolVar(&failOn, "fail-on-regression", false, "exit with status 3 when a figure got worse")
	fl.StringVar(&by, "by", "", "group the runs by a field of the environment they ran on ("+strings.Join(hostinfo.Fields, ", ")+") and compare the groups")
	fl.StringVar(&ref, "ref", "", "bundles: the reference column (its name, or the bundle's file) the ratios are against (default the first)")
	fl.BoolVar(&only, "only-this-run", false, "compare the runs alone, not the other phases or backends of their suite runs (automatic when two runs share one)")
	return cmd
}

// anyBundle reports whether an argument names a file (a study bundle).
func anyBundle(args []string) bool {
	for _, a := range args {
		if bundle.IsBundle(a) {
			return true
		}
	}
	return false
}

// compareBundles compares bundle files and stored runs (each answered as
// the questions its suite answers) side by side; the server is asked only
// for the runs.
func compareBundles(ctx context.Context, st Streams, srv *reportServer, args []string, by, ref, format string) error {
	var fields []string
	for _, f := range strings.Split(by, ",") {
		if f = strings.TrimSpace(f); f != "" {
			fields = append(fields, f)
		}
	}
	var bs []*bundle.Bundle
	for _, a := range args {
		if bundle.IsBundle(a) {
			b, err := bundle.Read(a)
			if err != nil {
				return err
			}
			bs = append(bs, b)
			continue
		}
		c, err := srv.client()
		if err != nil {
			return fmt.Errorf("%s is no file, so a run id, which needs a server: %w", a, err)
		}
		rctx, cancel := context.WithTimeout(ctx, srv.timeout)
		rep, err := fetchReport(rctx, c, a, false)
		cancel()
		if err != nil {
			return err
		}
		bs = append(bs, &bundle.Bundle{Schema: bundle.Schema, Name: a, Environment: rep.Environment,
			Sheet: evaluate.Sheet{Lines: evaluate.Judge(rep.Suite, rep.Rows)}})
	}
	cmp, err := bundle.Compare(bs, fields, ref)
	if err != nil {
		return err
	}
	switch format {
	case "json", "yaml":
		_, err := (&outputFlags{format: format}).print(st.Out, cmp)
		return err
	case "csv":
		w := csv.NewWriter(st.Out)
		_ = w.Write(append([]string{"question", "scope"}, cmp.Columns...))
		for _, l := range cmp.Lines {
			rec := []string{l.Question, l.Scope}
			for _, c := range l.Cells {
				rec = append(rec, c.Text())
			}
			_ = w.Write(rec)
		}
		w.Flush()
		return w.Error()
	case "text", "md":
		return cmp.WriteText(st.Out)
	}
	return fmt.Errorf("--format %q: want text, md, csv, json or yaml", format)
}
