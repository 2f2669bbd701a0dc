package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
)

// newMatrixCommand is `cnperf matrix coverage`: the age of every ordered
// node pair's latest matrix measurement, and the pairs overdue.
func newMatrixCommand(st Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "matrix", Short: "What the node-pair matrix has covered"}
	var db string
	var overdue time.Duration
	var onlyOverdue bool
	var sf serverFlags
	cov := &cobra.Command{
		Use:   "coverage (--server URL | --db DSN)",
		Short: "Print every ordered node pair's age (since its last matrix measurement) and the overdue ones",
		Long: `Read the matrix's coverage the server keeps (per ordered node pair, its
latest measurement of each kind, whichever run and plan made it) from the
server (GET /api/v2/matrix/coverage) or straight from its database, and
print each pair: when it was measured, its age, its last TCP throughput,
RR p50 and UDP loss. Pairs of the nodes known (from the coverage and the
agents) never measured, or measured longer ago than --overdue, are
overdue; the command exits 3 (as a failed SLO) when any is.`,
		Example: `  cnperf matrix coverage --server https://cnperf.example:8080
  cnperf matrix coverage --db sqlite:/tmp/lab.db
  cnperf matrix coverage --db postgres://cnperf@db/cnperf --overdue 12h --only-overdue`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if overdue <= 0 {
				return fmt.Errorf("--overdue %s: want a positive duration", overdue)
			}
			if db != "" && cmd.Flags().Changed("server") {
				return fmt.Errorf("--db and --server: give one, the server or its database")
			}
			if db == "" && sf.server == "" {
				return fmt.Errorf("no server: give --server URL (or CNPERF_SERVER) or --db DSN (the server's --db)")
			}
			var page coveragePager
			if db != "" {
				ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
				s, err := store.Open(ctx, db)
				cancel()
				if err != nil {
					return err
				}
				defer s.Close()
				page = func(ctx context.Context, q api.CoverageQuery) (api.MatrixCoverage, error) {
					return server.MatrixCoverage(ctx, s, time.Now(), q)
				}
			} else {
				ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
				c, done, err := sf.connect(ctx)
				cancel()
				if err != nil {
					return err
				}
				defer done()
				page = c.MatrixCoverage
			}
			late, err := printCoverage(cmd.Context(), st.Out, page, overdue, onlyOverdue)
			if err != nil {
				return fmt.Errorf("matrix coverage: %w", err)
			}
			if late > 0 {
				return &ExitError{Code: ExitSLOFailed, Err: fmt.Errorf("%d pairs overdue", late)}
			}
			return nil
		},
	}
	cov.Flags().StringVar(&db, "db", "", "the server's database (sqlite:PATH, postgres://..., mysql://...)")
	cov.Flags().DurationVar(&overdue, "overdue", 24*time.Hour, "a pair not measured within this long is overdue")
	cov.Flags().BoolVar(&onlyOverdue, "only-overdue", false, "print only the overdue pairs (and the summary)")
	sf.register(cov)
	cmd.AddCommand(cov)
	return cmd
}

// A coveragePager answers a page of the coverage (the server's API, or
// its database read in this process).
type coveragePager func(ctx context.Context, q api.CoverageQuery) (api.MatrixCoverage, error)

// coveragePageTimeout bounds each page's request.
const coveragePageTimeout = time.Minute

// printCoverage follows the coverage's pages, writing each page's pairs
// as it comes (a page at a time in memory, whatever N), then a summary
// line; it returns how many pairs are overdue. With onlyOverdue the
// server leaves the others out, and the summary's counts of measured
// pairs come from its tally.
func printCoverage(ctx context.Context, w io.Writer, page coveragePager, overdue time.Duration, onlyOverdue bool) (int, error) {
	late, covered, pairs, nodes := 0, 0, 0, 0
	var oldest time.Duration
	q := api.CoverageQuery{Overdue: overdue, OnlyOverdue: onlyOverdue}
	bw := bufio.NewWriter(w)
	for first := true; first || q.After != ""; first = false {
		pctx, cancel := context.WithTimeout(ctx, coveragePageTimeout)
		cover, err := page(pctx, q)
		cancel()
		if err != nil {
			return late, err
		}
		if first && onlyOverdue && cover.Tally != nil {
			covered, pairs = cover.Tally.Measured, cover.Tally.Pairs
			if cover.Tally.OldestS != nil {
				oldest = time.Duration(*cover.Tally.OldestS * float64(time.Second))
			}
		}
		if cover.Next != "" && cover.Next <= q.After {
			return late, fmt.Errorf("page after %q: next %q does not move on", q.After, cover.Next)
		}
		q.After = cover.Next
		nodes = len(cover.Nodes)
		// Columns as wide as the longest node name, so that pages line
		// up without holding them all.
		nw := len("RECEIVER")
		for _, n := range cover.Nodes {
			nw = max(nw, len(n))
		}
		row := func(cells ...any) {
			fmt.Fprintf(bw, "%-*s  %-*s  %-20s  %-16s  %-15s  %-10s  %-9s  %s\n", append([]any{nw, cells[0], nw, cells[1]}, cells[2:]...)...)
		}
		if first {
			row("SENDER", "RECEIVER", "MEASURED", "AGE", "KINDS", "TCP Gbit/s", "RR p50 ms", "UDP loss %")
		}
		for _, p := range cover.Pairs {
			age, measured := p.Age(cover.At)
			isLate := p.Overdue(cover.At, overdue)
			if isLate {
				late++
			}
			if !onlyOverdue {
				pairs++
				if measured {
					covered++
					oldest = max(oldest, age)
				}
			}
			if onlyOverdue && !isLate {
				continue
			}
			at, ages := "never", "-"
			if measured {
				at, ages = p.MeasuredAt.UTC().Format(time.RFC3339), age.Round(time.Second).String()
			}
			if isLate {
				ages += " OVERDUE"
			}
			fig := func(name string, div float64, f string) string {
				if v, ok := p.Figures[name]; ok {
					return fmt.Sprintf(f, v/div)
				}
				return "-"
			}
			row(p.Src, p.Dst, at, ages, strings.Join(p.Measures, ","),
				fig("throughput_bps.receiver", 1e9, "%.2f"), fig("rtt_ms.p50", 1, "%.3f"), fig("udp.loss_pct", 1, "%.2f"))
		}
		if err := bw.Flush(); err != nil {
			return late, err
		}
	}
	fmt.Fprintf(w, "%d of %d ordered pairs of %d nodes measured; oldest %s; %d overdue (not measured within %s)\n",
		covered, pairs, nodes, oldest.Round(time.Second), late, overdue)
	return late, nil
}
