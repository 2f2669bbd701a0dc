package cli

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/bundle"
	"github.com/cnperf/cnperf/internal/evaluate"
	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/labrun"
	"github.com/cnperf/cnperf/internal/suite"
)

// evalFlags are the flags of cnperf evaluate and cnperf lab evaluate.
type evalFlags struct {
	budget     time.Duration
	time       time.Duration
	repeat     int
	questions  string
	sloFile    string
	asJSON, md bool
	html, out  string
	allowNode  bool
	backend    string
	output     outputFlags // -o

	// Filled by prepare.
	cfg evaluate.Config
}

const evalLong = `Run the study in one command: the suites that answer each question, within
--budget (it prints first which questions fit, with each one's estimated
time, and which it leaves out and why), then one verdict sheet: a line per
question (per path, placement or variant) with a verdict word (holds,
partial, fails, measured, unknown, not asked), the figures behind it and
the reason. A question not asked says why: a capability the environment
lacks, an opt-in not given (--slo FILE, --allow-node-qdisc, --questions
policy), the budget.

Questions: ` + "%s" + `

--out FILE writes the study bundle (cnperf.bundle/v1: the sheet, every
run and row, the environment) that cnperf report FILE renders and cnperf
compare sets beside others without a server. Exit status 3 when an SLO
of --slo failed.`

func (f *evalFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	secondsOrDurationVarP(fl, &f.budget, "budget", "", evaluate.DefaultBudget, "time the study's measurements may take; questions that do not fit are not asked")
	secondsOrDurationVarP(fl, &f.time, "time", "", evaluate.DefaultTime, "length of each timed measurement")
	fl.IntVar(&f.repeat, "repeat", evaluate.DefaultRepeat, "repetitions of each measurement (rows show the median and min-max)")
	fl.StringVar(&f.questions, "questions", "", "ask only these questions, comma-separated ("+strings.Join(evaluate.IDs(), ", ")+")")
	fl.StringVar(&f.sloFile, "slo", "", "SLO file to evaluate against every row (the slo question); a failed objective exits with code 3")
	fl.BoolVar(&f.asJSON, "json", false, "print the sheet's data as JSON (sheet, environment): -o json")
	f.output.registerOutput(cmd)
	fl.BoolVar(&f.md, "markdown", false, "print the sheet as a Markdown table")
	fl.StringVar(&f.html, "html", "", "write the sheet with every suite's tables and charts to FILE")
	fl.StringVar(&f.out, "out", "", "write the study bundle (JSON, schema "+bundle.Schema+") to FILE")
	fl.BoolVar(&f.allowNode, "allow-node-qdisc", false, "let suites put a qdisc on a node's interface where the nodes are not the run's own (a cluster)")
}

// prepare checks the flags and reads the SLO file before anything runs.
func (f *evalFlags) prepare(progress io.Writer) error {
	if f.asJSON && f.md {
		return errors.New("--json and --markdown exclude each other")
	}
	f.output.asJSON = f.asJSON
	if err := f.output.check(); err != nil {
		return err
	}
	if f.output.format == "markdown" {
		f.md = true
	}
	f.cfg = evaluate.Config{Budget: f.budget, Progress: progress,
		Options: suite.Options{Time: f.time, Repeat: f.repeat, Backend: f.backend}}
	if err := f.cfg.Options.Validate(); err != nil {
		return fmt.Errorf("--time/--repeat: %w", err)
	}
	if f.budget <= 0 {
		return fmt.Errorf("--budget %v: want more than 0", f.budget)
	}
	if f.allowNode {
		f.cfg.Options.Set = map[string]string{suite.SetAllowNodeQdisc: "true"}
	}
	if f.questions != "" {
		for _, q := range strings.Split(f.questions, ",") {
			if q = strings.TrimSpace(q); q != "" {
				f.cfg.Only = append(f.cfg.Only, q)
			}
		}
		ids := evaluate.IDs()
		for _, q := range f.cfg.Only {
			if !slices.Contains(ids, q) {
				return fmt.Errorf("--questions: unknown question %q (known: %s)", q, strings.Join(ids, ", "))
			}
		}
	}
	if f.sloFile != "" {
		objs, err := readSLOFile(f.sloFile)
		if err != nil {
			return err
		}
		f.cfg.Objectives = objs
	}
	for _, p := range []string{f.out, f.html} {
		if p != "" {
			if st, err := os.Stat(dirOf(p)); err != nil || !st.IsDir() {
				return fmt.Errorf("cannot write %s: no directory %s", p, dirOf(p))
			}
		}
	}
	return nil
}

// run evaluates on r and writes the sheet, the bundle and the page.
func (f *evalFlags) run(ctx context.Context, st Streams, r evaluate.Runner) error {
	res, err := evaluate.Evaluate(ctx, r, suites(), f.cfg)
	if err != nil {
		return err
	}
	b, err := bundle.New(res, readBuildInfo().Version, time.Now())
	if err != nil {
		return err
	}
	return f.write(st, b)
}

// write prints the sheet and writes --out and --html.
func (f *evalFlags) write(st Streams, b *bundle.Bundle) error {
	if f.out != "" {
		if err := writeFileAtomic(f.out, b.Write); err != nil {
			return err
		}
		fmt.Fprintf(st.Err, "wrote %s\n", f.out)
	}
	if f.html != "" {
		if err := writeFileAtomic(f.html, func(w io.Writer) error { return b.WriteHTML(w, suites()) }); err != nil {
			return err
		}
		fmt.Fprintf(st.Err, "wrote %s\n", f.html)
	}
	data := struct {
		Schema      string         `json:"schema"`
		Sheet       evaluate.Sheet `json:"sheet"`
		Environment any            `json:"environment,omitempty"`
	}{bundle.Schema, b.Sheet, b.Environment}
	done, err := f.output.print(st.Out, data)
	switch {
	case done:
	case f.output.format == "csv":
		w := csv.NewWriter(st.Out)
		_ = w.Write(evaluate.Header)
		for _, l := range b.Sheet.Lines {
			_ = w.Write(l.Cells())
		}
		w.Flush()
		err = w.Error()
	case f.md:
		err = b.Sheet.WriteMarkdown(st.Out)
	default:
		err = b.WriteText(st.Out, suites(), false)
	}
	if err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return sloError(b.Sheet.Checks)
}

func newEvaluateCommand(g *globalOptions, st Streams) *cobra.Command {
	var (
		f   evalFlags
		srv serverFlags
		kf  k8sRunFlags
	)
	cmd := &cobra.Command{
		Use:   "evaluate",
		Short: "Run the study within a time budget and print one verdict sheet (--out: a study bundle)",
		Long: fmt.Sprintf(evalLong, strings.Join(evaluate.IDs(), ", ")) + `

On a cluster: cnperf evaluate --k8s; on any server: --server URL. In a
lab of namespaces built for the study: cnperf lab evaluate.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.prepare(st.Err); err != nil {
				return err
			}
			r := &suite.Runner{Progress: st.Err, Log: g.logger(st)}
			if kf.on {
				if cmd.Flags().Changed("server") {
					return errors.New("--k8s and --server exclude each other")
				}
				kf.timeout = srv.requestTimeout
				if kf.timeout <= 0 {
					kf.timeout = k8s.DefaultRequestTimeout
				}
				c, err := kf.client(cmd.Context())
				if err != nil {
					return err
				}
				o := k8s.OpenOptions{CNIConfDir: kf.cniDir, AllowNodeQdisc: f.allowNode, Token: srv.token, Notes: st.Err}
				for _, n := range suites().Names() {
					s, _ := suites().Get(n)
					if u, ok := s.(suite.CapUser); ok {
						o.MayUse = append(o.MayUse, u.MayUse()...)
					}
				}
				sess, err := k8s.Open(cmd.Context(), c, o)
				if err != nil {
					return err
				}
				defer sess.Close()
				r.API, r.Env = sess.API, sess.Env
				return f.run(cmd.Context(), st, r)
			}
			if srv.server == "" {
				return errors.New("no server: give --k8s, --server URL (or set CNPERF_SERVER), or use cnperf lab evaluate")
			}
			c, err := srv.client()
			if err != nil {
				return err
			}
			r.API = c
			return f.run(cmd.Context(), st, r)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.backend, "backend", "", "the cluster's network backend, as a label for the rows (e.g. vxlan)")
	srv.register(cmd)
	kf.register(cmd)
	return cmd
}

func newLabEvaluateCommand(g *globalOptions, st Streams) *cobra.Command {
	var (
		f        evalFlags
		lf       labFlags
		cfg      lab.Config
		rate     string
		nodeRate []string
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "evaluate",
		Short: "Build a lab, run the study in it within a budget, print the verdict sheet, remove the lab",
		Long: fmt.Sprintf(evalLong, strings.Join(evaluate.IDs(), ", ")) + `

The lab (default a VXLAN overlay, where a mark can be lost at
encapsulation) is built once for the study and removed afterwards, also
when the study fails or is interrupted. Needs root.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Backend = f.backend
			if err := f.prepare(st.Err); err != nil {
				return err
			}
			if err := lab.CheckPrivileges(); err != nil {
				return fmt.Errorf("%w: sudo cnperf lab evaluate", err)
			}
			cfg.Name, cfg.StateDir = lf.name, lf.stateDir
			if err := underlayRates(&cfg, rate, nodeRate); err != nil {
				return err
			}
			return labrun.Session(cmd.Context(), labrun.Config{Lab: cfg, Cnperf: lab.CnperfOptions{LogLevel: logLevel},
				Progress: st.Err, Log: g.logger(st)}, func(ctx context.Context, r *suite.Runner) error {
				return f.run(ctx, st, r)
			})
		},
	}
	f.register(cmd)
	lf.register(cmd)
	_ = cmd.Flags().Set("name", envOr("CNPERF_LAB_NAME", "eval"))
	cmd.Flags().Lookup("name").DefValue = "eval"
	fl := cmd.Flags()
	fl.StringVar(&f.backend, "backend", lab.BackendVXLAN, "pod network backend of the lab: host-gw or vxlan")
	fl.IntVar(&cfg.Nodes, "nodes", lab.DefaultNodes, "number of nodes")
	fl.IntVar(&cfg.PodsPerNode, "pods-per-node", 3, "pods on each node (contention's same-node case needs flows+1)")
	fl.StringVar(&rate, "underlay-rate", "", "limit each node's underlay link, e.g. 1G (bits/s); default no limit")
	fl.StringArrayVar(&nodeRate, "node-underlay-rate", nil, "limit one node's underlay link both ways, NODE=RATE; repeatable")
	fl.IntVar(&cfg.MTU, "mtu", lab.DefaultMTU, "underlay MTU (pods get MTU-50 on vxlan)")
	fl.StringVar(&cfg.UnderlaySegmentation, "underlay-segmentation", lab.SegmentHost, "where the underlay segments: host or nic")
	fl.StringVar(&logLevel, "agent-log-level", "info", "log level of the lab's server and agents")
	return cmd
}
