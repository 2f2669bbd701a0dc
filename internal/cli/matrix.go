package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/store"
)

// newMatrixCommand is `cnperf matrix coverage`: the age of every ordered
// node pair's latest matrix measurement, and the pairs overdue.
func newMatrixCommand(st Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "matrix", Short: "What the node-pair matrix has covered"}
	var db string
	var overdue time.Duration
	var onlyOverdue bool
	cov := &cobra.Command{
		Use:   "coverage --db DSN",
		Short: "Print every ordered node pair's age (since its last matrix measurement) and the overdue ones",
		Long: `Read the matrix's coverage the server keeps (per ordered node pair, its
latest measurement of each kind, whichever run and plan made it) from the
server's database, and print each pair: when it was measured, its age,
its last TCP throughput, RR p50 and UDP loss. Pairs of the nodes known
(from the coverage and the agents) never measured, or measured longer
ago than --overdue, are overdue; the command exits 3 (as a failed SLO) when any is.`,
		Example: `  cnperf matrix coverage --db sqlite:/tmp/lab.db
  cnperf matrix coverage --db postgres://cnperf@db/cnperf --overdue 12h --only-overdue`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if db == "" {
				return fmt.Errorf("no database: give --db DSN (the server's --db)")
			}
			if overdue <= 0 {
				return fmt.Errorf("--overdue %s: want a positive duration", overdue)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			s, err := store.Open(ctx, db)
			if err != nil {
				return err
			}
			defer s.Close()
			pairs, err := s.ListMatrixPairs(ctx)
			if err != nil {
				return err
			}
			agents, err := s.ListAgents(ctx, store.AgentFilter{IncludeOffline: true})
			if err != nil {
				return err
			}
			var nodes []string
			for _, a := range agents {
				nodes = append(nodes, a.NodeName)
			}
			late := printCoverage(st.Out, Coverage(pairs, nodes), time.Now(), overdue, onlyOverdue)
			if late > 0 {
				return &ExitError{Code: ExitSLOFailed, Err: fmt.Errorf("%d pairs overdue", late)}
			}
			return nil
		},
	}
	cov.Flags().StringVar(&db, "db", "", "the server's database (sqlite:PATH, postgres://..., mysql://...)")
	cov.Flags().DurationVar(&overdue, "overdue", 24*time.Hour, "a pair not measured within this long is overdue")
	cov.Flags().BoolVar(&onlyOverdue, "only-overdue", false, "print only the overdue pairs (and the summary)")
	cmd.AddCommand(cov)
	return cmd
}

// PairCoverage is one ordered pair's coverage: when its measurements
// were last made (the oldest of its kinds' latest; zero: never) and its
// last figures.
type PairCoverage struct {
	Src, Dst string
	At       time.Time
	Measures []string
	Figures  map[string]float64
}

// Coverage gathers the kept measurements by ordered pair, adding the
// pairs of nodes that were never measured, in node order.
func Coverage(kept []store.MatrixPair, nodes []string) []PairCoverage {
	by := map[[2]string]*PairCoverage{}
	for _, p := range kept {
		k := [2]string{p.Src, p.Dst}
		c := by[k]
		if c == nil {
			c = &PairCoverage{Src: p.Src, Dst: p.Dst, At: p.MeasuredAt, Figures: map[string]float64{}}
			by[k] = c
		}
		if p.MeasuredAt.Before(c.At) {
			c.At = p.MeasuredAt
		}
		c.Measures = append(c.Measures, p.Measure)
		var fig map[string]float64
		if json.Unmarshal([]byte(p.Figures), &fig) == nil {
			for name, v := range fig {
				c.Figures[name] = v
			}
		}
		nodes = append(nodes, p.Src, p.Dst)
	}
	slices.Sort(nodes)
	nodes = slices.Compact(nodes)
	var out []PairCoverage
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			if c := by[[2]string{a, b}]; c != nil {
				out = append(out, *c)
			} else {
				out = append(out, PairCoverage{Src: a, Dst: b})
			}
		}
	}
	return out
}

// printCoverage writes the pairs and a summary line; it returns how many
// are overdue.
func printCoverage(w io.Writer, pairs []PairCoverage, now time.Time, overdue time.Duration, onlyOverdue bool) int {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SENDER\tRECEIVER\tMEASURED\tAGE\tKINDS\tTCP Gbit/s\tRR p50 ms\tUDP loss %\t")
	late, covered := 0, 0
	var oldest time.Duration
	for _, p := range pairs {
		isLate := p.At.IsZero() || now.Sub(p.At) > overdue
		if isLate {
			late++
		}
		if !p.At.IsZero() {
			covered++
			oldest = max(oldest, now.Sub(p.At))
		}
		if onlyOverdue && !isLate {
			continue
		}
		at, age := "never", "-"
		if !p.At.IsZero() {
			at, age = p.At.UTC().Format(time.RFC3339), now.Sub(p.At).Round(time.Second).String()
		}
		if isLate {
			age += " OVERDUE"
		}
		fig := func(name string, div float64, f string) string {
			if v, ok := p.Figures[name]; ok {
				return fmt.Sprintf(f, v/div)
			}
			return "-"
		}
		slices.Sort(p.Measures)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Src, p.Dst, at, age, strings.Join(p.Measures, ","),
			fig("throughput_bps.receiver", 1e9, "%.2f"), fig("rtt_ms.p50", 1, "%.3f"), fig("udp.loss_pct", 1, "%.2f"))
	}
	tw.Flush()
	nodes := map[string]bool{}
	for _, p := range pairs {
		nodes[p.Src], nodes[p.Dst] = true, true
	}
	fmt.Fprintf(w, "%d of %d ordered pairs of %d nodes measured; oldest %s; %d overdue (not measured within %s)\n",
		covered, len(pairs), len(nodes), oldest.Round(time.Second), late, overdue)
	return late
}
