package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			var cover api.MatrixCoverage
			if db != "" {
				s, err := store.Open(ctx, db)
				if err != nil {
					return err
				}
				defer s.Close()
				if cover, err = server.MatrixCoverage(ctx, s, time.Now()); err != nil {
					return err
				}
			} else {
				c, done, err := sf.connect(ctx)
				if err != nil {
					return err
				}
				defer done()
				if cover, err = c.MatrixCoverage(ctx); err != nil {
					return fmt.Errorf("matrix coverage: %w", err)
				}
			}
			if late := printCoverage(st.Out, cover, overdue, onlyOverdue); late > 0 {
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

// printCoverage writes the pairs and a summary line; it returns how many
// are overdue.
func printCoverage(w io.Writer, cover api.MatrixCoverage, overdue time.Duration, onlyOverdue bool) int {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SENDER\tRECEIVER\tMEASURED\tAGE\tKINDS\tTCP Gbit/s\tRR p50 ms\tUDP loss %\t")
	late, covered := 0, 0
	var oldest time.Duration
	for _, p := range cover.Pairs {
		age, measured := p.Age(cover.At)
		isLate := p.Overdue(cover.At, overdue)
		if isLate {
			late++
		}
		if measured {
			covered++
			oldest = max(oldest, age)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Src, p.Dst, at, ages, strings.Join(p.Measures, ","),
			fig("throughput_bps.receiver", 1e9, "%.2f"), fig("rtt_ms.p50", 1, "%.3f"), fig("udp.loss_pct", 1, "%.2f"))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d of %d ordered pairs of %d nodes measured; oldest %s; %d overdue (not measured within %s)\n",
		covered, len(cover.Pairs), len(cover.Nodes), oldest.Round(time.Second), late, overdue)
	return late
}
