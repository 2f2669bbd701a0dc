package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/labrun"
	"github.com/cnperf/cnperf/internal/mesh"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/builtin"
)

// ExitSLOFailed is the exit code of a suite run whose SLO failed.
const ExitSLOFailed = 3

// suites is the registry of suites (internal/suite/builtin).
func suites() *suite.Registry { return builtin.Registry() }

// suiteFlags are the flags of `cnperf run` and `cnperf lab run`.
type suiteFlags struct {
	time            time.Duration
	repeat          int
	backends        string
	set             []string
	asJSON, csv, md bool
	out             outputFlags // -o, the same choice as the three above
	sloFile         string
	html            string // report page to write (report.go)

	// avail reads the ping mesh's availability for the file's
	// availability objectives (nil where there is no server to ask).
	avail suite.AvailabilitySource

	// Filled by prepare.
	objectives  []suite.Objective
	format      string
	suite       suite.Suite
	opts        suite.Options
	backendList []string
}

func (f *suiteFlags) register(cmd *cobra.Command, backendsDefault, backendsHelp string) {
	fl := cmd.Flags()
	secondsOrDurationVarP(fl, &f.time, "time", "", 5*time.Second, "length of each timed measurement: 5s, 500ms, or seconds")
	fl.IntVar(&f.repeat, "repeat", 3, "repetitions of each measurement (rows show the median and min-max)")
	fl.StringVar(&f.backends, "backends", backendsDefault, backendsHelp)
	fl.StringArrayVar(&f.set, "set", nil, "suite setting KEY=VALUE, repeatable (the suite's keys: cnperf suites SUITE, or SUITE --help)")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON (run_id, run_ids, rows[] with medians and min/max, outcomes)")
	fl.BoolVar(&f.csv, "csv", false, "print CSV, one line per figure")
	fl.BoolVar(&f.md, "markdown", false, "print Markdown tables")
	f.out.registerOutput(cmd)
	fl.StringVar(&f.sloFile, "slo", "", "SLO file to evaluate against the rows; a failed objective exits with code 3")
	fl.StringVar(&f.html, "html", "", "also write the HTML report (tables and SVG charts) to FILE")
	suiteCommandHelp(cmd)
}

// prepare checks the flags and the suite before anything runs.
func (f *suiteFlags) prepare(name string) error {
	n := 0
	f.format = "table"
	for _, c := range []struct {
		on   bool
		name string
	}{{f.asJSON, "json"}, {f.csv, "csv"}, {f.md, "markdown"}} {
		if c.on {
			n++
			f.format = c.name
		}
	}
	if n > 1 {
		return errors.New("--json, --csv and --markdown exclude each other")
	}
	if err := f.out.check(); err != nil {
		return err
	}
	if o := f.out.format; o != "" {
		if o == "wide" {
			o = "table" // the report's table has no narrower form
		}
		if n == 1 && o != f.format {
			return fmt.Errorf("--%s and -o %s: give one", f.format, f.out.format)
		}
		f.format = o
	}
	s, err := suites().Get(name)
	if err != nil {
		return err
	}
	f.suite = s
	f.opts = suite.Options{Time: f.time, Repeat: f.repeat}
	if err := f.opts.Validate(); err != nil {
		return fmt.Errorf("--time/--repeat: %w", err)
	}
	for _, kv := range f.set {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--set %q: want KEY=VALUE", kv)
		}
		if f.opts.Set == nil {
			f.opts.Set = map[string]string{}
		}
		f.opts.Set[k] = v
	}
	// Settings are checked before any lab or run is made.
	if err := suite.CheckKeys(f.suite, f.opts); err != nil {
		return err
	}
	if c, ok := f.suite.(suite.OptionsChecker); ok {
		if err := c.CheckOptions(f.opts); err != nil {
			return err
		}
	}
	if f.backends != "" {
		bs, err := suite.ParseBackends(f.backends, nil)
		if err != nil {
			return fmt.Errorf("--backends: %w", err)
		}
		f.backendList = bs
	}
	if f.sloFile != "" {
		objs, err := readSLOFile(f.sloFile)
		if err != nil {
			return err
		}
		f.objectives = objs
	}
	return nil
}

// readSLOFile reads and parses the SLO file named by --slo.
func readSLOFile(path string) ([]suite.Objective, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--slo: %w", err)
	}
	objs, err := suite.ParseSLOs(data, suites())
	if err != nil {
		return nil, fmt.Errorf("--slo %s: %w", path, err)
	}
	return objs, nil
}

// print builds the report of the suite run that just ended from its runs,
// as `cnperf report RUN_ID` and the dashboard build it from the stored
// runs (report.FromLive), writes it in the chosen format and evaluates the
// SLO.
func (f *suiteFlags) print(st Streams, reps ...suite.Report) error {
	rep, err := report.FromLive(suites(), reps...)
	if err != nil {
		return err
	}
	f.evaluate(rep)
	return f.write(st, rep)
}

// write writes rep in the chosen format (and --html) and returns the SLO's
// exit error.
func (f *suiteFlags) write(st Streams, rep *report.Report) error {
	w := reportWriters[map[string]string{"json": "json", "csv": "csv", "markdown": "md", "yaml": "yaml"}[f.format]]
	if w == nil {
		w = reportWriters["text"]
	}
	if err := w(rep, st.Out); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if f.html != "" {
		if err := writeFileAtomic(f.html, rep.WriteHTML); err != nil {
			return err
		}
	}
	return sloError(rep.Checks)
}

// evaluate sets the report's checks from the --slo objectives, if any.
func (f *suiteFlags) evaluate(rep *report.Report) {
	if len(f.objectives) > 0 {
		rep.Checks = suite.Evaluate(f.objectives, rep.Rows)
		rep.Checks = append(rep.Checks, suite.EvaluateAvailability(f.objectives, f.avail)...)
	}
}

// meshAvailability is the availability source of a server: its stored
// ping-mesh rounds over the window ending now.
func meshAvailability(ctx context.Context, c *client.Client) suite.AvailabilitySource {
	return func(w time.Duration, conn string) (suite.MeshAvailability, error) {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return mesh.Availability(ctx, c, w, time.Now(), conn)
	}
}

// sloError is the exit error of a run whose checks failed (exit code
// ExitSLOFailed), or nil when every check passed or there were none.
func sloError(checks []suite.Check) error {
	if len(checks) == 0 || suite.AllPass(checks) {
		return nil
	}
	failed := 0
	for _, c := range checks {
		if c.Failed() {
			failed++
		}
	}
	return &ExitError{Code: ExitSLOFailed, Err: fmt.Errorf("SLO failed: %d of %d checks", failed, len(checks))}
}

func suiteHelp() string {
	var b strings.Builder
	r := suites()
	for _, n := range r.Names() {
		s, _ := r.Get(n)
		fmt.Fprintf(&b, "  %-12s %s\n", n, s.Describe())
	}
	return b.String()
}

func newRunCommand(g *globalOptions, st Streams) *cobra.Command {
	var (
		f                 suiteFlags
		srv               serverFlags
		labName, stateDir string
		kf                k8sRunFlags
	)
	cmd := &cobra.Command{
		Use:   "run SUITE",
		Short: "Run a suite against a cnperf server and print its table",
		Long: `Run a suite on the agents registered with a cnperf server, wait for it
(a progress line on stderr) and print its rows: each figure the median of
the repetitions, with min-max. Suites:
` + suiteHelp() + `
A cluster has one network backend: --backends names it for the rows (and
cni-compare needs it). To compare backends, use cnperf lab run cni-compare.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.prepare(args[0]); err != nil {
				return err
			}
			if len(f.backendList) > 1 {
				return fmt.Errorf("--backends %s: a cluster has one backend; cnperf lab run %s builds one lab per backend", f.backends, args[0])
			}
			if len(f.backendList) == 1 {
				f.opts.Backend = f.backendList[0]
			}
			r := &suite.Runner{Progress: st.Err, Log: g.logger(st)}
			kf.timeout = srv.requestTimeout // one bound, for the server and the Kubernetes API
			if kf.timeout <= 0 {
				kf.timeout = k8s.DefaultRequestTimeout
			}
			switch {
			case kf.on:
				if labName != "" || cmd.Flags().Changed("server") {
					return errors.New("--k8s and --lab/--server exclude each other")
				}
				return runOnK8s(cmd.Context(), st, &f, r, &kf, srv.token)
			case labName != "":
				if cmd.Flags().Changed("server") || cmd.Flags().Changed("token") {
					return errors.New("--lab and --server/--token exclude each other")
				}
				if err := lab.CheckPrivileges(); err != nil {
					return err
				}
				l, err := lab.Open(labName, stateDir)
				if err != nil {
					return err
				}
				cp, err := l.ControlPlane()
				if err != nil {
					return err
				}
				c, err := cp.Client()
				if err != nil {
					return err
				}
				r.API, r.Env = c, labrun.NewEnv(l)
				f.avail = meshAvailability(cmd.Context(), c)
				if f.opts.Backend == "" {
					f.opts.Backend = l.Config.Backend
				}
			case srv.server == "":
				return errors.New("no server: give --server URL (or set CNPERF_SERVER), or --lab NAME")
			default:
				c, err := srv.client()
				if err != nil {
					return err
				}
				r.API = c
				f.avail = meshAvailability(cmd.Context(), c)
			}
			rep, err := r.Run(cmd.Context(), f.suite, f.opts)
			if err != nil {
				return err
			}
			return f.print(st, rep)
		},
	}
	f.register(cmd, "", "the cluster's network backend, as a label for the rows (e.g. vxlan)")
	srv.register(cmd)
	cmd.Flags().StringVar(&labName, "lab", "", "run against the cnperf server of this lab (made by cnperf lab up)")
	cmd.Flags().StringVar(&stateDir, "state-dir", envOr("CNPERF_LAB_STATE_DIR", lab.DefaultStateDir), "directory of the labs' state files (with --lab)")
	kf.register(cmd)
	return cmd
}
