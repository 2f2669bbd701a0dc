package cli

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/labrun"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

// defaultLabRunName is the lab name of `cnperf lab run`, apart from the
// default of `cnperf lab up` so that a lab the user keeps is not in the way.
const defaultLabRunName = "run"

func newLabRunCommand(g *globalOptions, st Streams) *cobra.Command {
	var (
		f        suiteFlags
		lf       labFlags
		cfg      lab.Config
		rate     string
		nodeRate []string
		backend  string
		logLevel string
		db       string
		zones    int
	)
	cmd := &cobra.Command{
		Use:   "run SUITE",
		Short: "Build a lab, run a suite in it, print the table, remove the lab",
		Long: `Build a lab, start the cnperf server (SQLite) in its underlay and an agent
in every pod and node, run the suite through the server's API, print its
rows and remove the lab again, also when the suite fails or is interrupted.
cni-compare builds one lab per backend (--backends, default host-gw,vxlan),
one after the other. Suites:
` + suiteHelp() + `
Needs root (CAP_NET_ADMIN).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.prepare(args[0]); err != nil {
				return err
			}
			if err := lab.CheckPrivileges(); err != nil {
				return fmt.Errorf("%w: sudo cnperf lab run %s", err, args[0])
			}
			backends := f.backendList
			if suite.ComparesBackends(f.suite) {
				if cmd.Flags().Changed("backend") {
					return fmt.Errorf("%s takes --backends (a list), not --backend", args[0])
				}
				if len(backends) == 0 {
					backends = []string{lab.BackendHostGW, lab.BackendVXLAN}
				}
			} else {
				if len(backends) > 0 {
					return fmt.Errorf("--backends is for suites that compare backends; %s takes --backend", args[0])
				}
				backends = []string{backend}
			}
			cfg.Name, cfg.StateDir = lf.name, lf.stateDir
			if db != "" {
				abs, err := filepath.Abs(db)
				if err != nil {
					return fmt.Errorf("--db: %w", err)
				}
				db = abs
			}
			if err := underlayRates(&cfg, rate, nodeRate); err != nil {
				return err
			}
			if zones < 0 || zones > cfg.Nodes {
				return fmt.Errorf("--zones %d: want 0 (none) to the number of nodes (%d)", zones, cfg.Nodes)
			}
			lc := labrun.Config{
				Lab: cfg, Backends: backends, Suite: f.suite, Options: f.opts, Zones: zones,
				Cnperf:   lab.CnperfOptions{LogLevel: logLevel, DB: db},
				Progress: st.Err, Log: g.logger(st),
			}
			// The matrix's coverage, read from the lab's server before
			// the lab goes.
			var covers []*bytes.Buffer
			if f.suite.Name() == matrix.SuiteName {
				lc.Done = func(ctx context.Context, c *client.Client) error {
					var b bytes.Buffer
					if _, err := printCoverage(ctx, &b, c.MatrixCoverage, 24*time.Hour, false); err != nil {
						return fmt.Errorf("matrix coverage: %w", err)
					}
					covers = append(covers, &b)
					return nil
				}
			}
			reps, err := labrun.Run(cmd.Context(), lc)
			if err != nil {
				return err
			}
			perr := f.print(st, reps...)
			w := st.Out
			if f.format != "table" {
				w = st.Err // keep the output one document
			}
			for _, cov := range covers {
				fmt.Fprintln(w, "\nMatrix coverage (cnperf matrix coverage):")
				_, _ = cov.WriteTo(w)
			}
			if db != "" {
				fmt.Fprintf(st.Err, "runs kept in %s: cnperf server --db sqlite:%s, or cnperf matrix coverage --db sqlite:%s\n", db, db, db)
			}
			return perr
		},
	}
	f.register(cmd, "", "cni-compare: backends to compare, one lab each (default host-gw,vxlan)")
	lf.register(cmd)
	_ = cmd.Flags().Set("name", envOr("CNPERF_LAB_NAME", defaultLabRunName))
	cmd.Flags().Lookup("name").DefValue = defaultLabRunName
	fl := cmd.Flags()
	fl.IntVar(&cfg.Nodes, "nodes", lab.DefaultNodes, "number of nodes")
	fl.IntVar(&cfg.PodsPerNode, "pods-per-node", lab.DefaultPodsPerNode, "pods on each node")
	fl.StringVar(&backend, "backend", lab.BackendHostGW, "pod network backend of the lab: host-gw or vxlan")
	fl.BoolVar(&cfg.VXLANInheritTOS, "vxlan-inherit-tos", false, "VXLAN outer header copies the inner TOS")
	fl.StringVar(&rate, "underlay-rate", "", "limit each node's underlay link, e.g. 1G (bits/s); default no limit")
	fl.IntVar(&cfg.MTU, "mtu", lab.DefaultMTU, "underlay MTU (pods get MTU-50 on vxlan)")
	fl.StringArrayVar(&nodeRate, "node-underlay-rate", nil, "limit one node's underlay link both ways, NODE=RATE (n3=100M); repeatable")
	fl.StringVar(&cfg.UnderlaySegmentation, "underlay-segmentation", lab.SegmentHost, "where the underlay segments: host (veths pass 64 KB batches) or nic (TSO/GSO off on the underlay, MTU-sized packets as a NIC puts on its wire)")
	fl.StringVar(&db, "db", "", "keep the server's runs in this SQLite file (default: a temporary one, removed after the run); serve it later with cnperf server --db sqlite:PATH")
	fl.IntVar(&zones, "zones", 0, "label the nodes with topology.kubernetes.io/zone, N zones in turn (zone-a: n1, ...), for matrix --set plan=zones")
	fl.StringVar(&logLevel, "agent-log-level", "info", "log level of the lab's server and agents (their logs are kept when the run fails)")
	return cmd
}
