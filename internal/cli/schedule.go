package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api"
)

// newScheduleCommand holds the verbs of schedules: suites the server runs
// by itself (docs/matrix.md, "Schedules").
func newScheduleCommand(st Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Suites the server runs by itself at an interval: create, list, runs, delete",
	}
	cmd.AddCommand(newScheduleCreateCommand(st), newScheduleListCommand(st), newScheduleRunsCommand(st), newScheduleDeleteCommand(st))
	return cmd
}

func newScheduleCreateCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	var name, every, sloFile, backend string
	var sets []string
	var tm time.Duration
	var repeat int
	cmd := &cobra.Command{
		Use:   "create --suite SUITE --every DURATION",
		Short: "Have the server run a suite every DURATION (first at once), never two runs of it at once",
		Long: `Create a schedule (POST /api/v2/schedules): the server runs the suite
against the agents it holds, first at once and then every --every, and
keeps every run's runs, rows, outliers and SLO verdict (cnperf schedule
runs ID, the dashboard's Schedules page, /metrics). A run still going when
the next is due makes that due time skipped, with the reason. --every is
at least the server's --schedule-min-every (1m by default).`,
		Example: `  cnperf schedule create --suite matrix --every 6h
  cnperf schedule create --suite matrix --every 30m --time 2s --repeat 1 --set udp-rate=200M --slo slo.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return errors.New("--suite: name the suite to run (cnperf suites lists them)")
			}
			if _, err := time.ParseDuration(strings.TrimSpace(every)); err != nil {
				return fmt.Errorf("--every %q: want a duration such as 6h, 30m or 90s", every)
			}
			if repeat < 1 || repeat > 100 {
				return fmt.Errorf("--repeat %d: want 1-100", repeat)
			}
			sc := api.ScheduleCreate{Suite: name, Every: every, Time: tm.String(), Repeat: repeat, Backend: backend}
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--set %q: want KEY=VALUE", kv)
				}
				if sc.Set == nil {
					sc.Set = map[string]string{}
				}
				sc.Set[k] = v
			}
			if sloFile != "" {
				data, err := os.ReadFile(sloFile)
				if err != nil {
					return fmt.Errorf("--slo: %w", err)
				}
				if !json.Valid(data) {
					return fmt.Errorf("--slo %s: not JSON", sloFile)
				}
				sc.SLO = data
			}
			cl, err := rf.client()
			if err != nil {
				return err
			}
			got, err := cl.CreateSchedule(cmd.Context(), sc)
			if err != nil {
				return fmt.Errorf("create schedule: %w", err)
			}
			if ok, err := rf.out.printData(st.Out, got); ok {
				return err
			}
			_, err = fmt.Fprintf(st.Out, "schedule %s: %s every %s, next %s\n", got.ID, got.Suite, got.Every, got.NextAt.UTC().Format(time.RFC3339))
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&name, "suite", "", "the suite to run (cnperf suites lists them)")
	fl.StringVar(&every, "every", "", "interval between runs: 6h, 30m, 90s")
	secondsOrDurationVarP(fl, &tm, "time", "", 5*time.Second, "length of each timed measurement: 5s, 500ms, or seconds")
	fl.IntVar(&repeat, "repeat", 3, "repetitions of each measurement")
	fl.StringVar(&backend, "backend", "", "label of the network backend under test, for the rows")
	fl.StringArrayVar(&sets, "set", nil, "suite setting KEY=VALUE, repeatable (the suite's keys: cnperf suites SUITE)")
	fl.StringVar(&sloFile, "slo", "", "SLO file evaluated against every run's rows (docs/slo.md)")
	rf.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("suite", func(c *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return completeSuiteNames(c, nil, toComplete)
	})
	_ = cmd.RegisterFlagCompletionFunc("set", func(c *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return completeSetKeys(c, []string{name}, toComplete)
	})
	return cmd
}

func newScheduleListCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List schedules with their latest runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			scs, err := cl.ListSchedules(cmd.Context())
			if err != nil {
				return fmt.Errorf("list schedules: %w", err)
			}
			if ok, err := rf.out.print(st.Out, scs); ok {
				return err
			}
			return writeSchedules(rf.out.table(st.Out), scs, time.Now())
		},
	}
	rf.register(cmd)
	return cmd
}

// writeSchedules prints one line per schedule with its latest run.
func writeSchedules(tw tableWriter, scs []api.Schedule, now time.Time) error {
	fmt.Fprintln(tw, "ID\tSUITE\tEVERY\tOPTIONS\tNEXT\tLAST RUN\tSLO\tOUTLIERS")
	for _, sc := range scs {
		opts := fmt.Sprintf("time=%s repeat=%d", sc.Time, sc.Repeat)
		for _, k := range slices.Sorted(maps.Keys(sc.Set)) {
			opts += " " + k + "=" + sc.Set[k]
		}
		last, slo, outliers := "never", "-", "-"
		if len(sc.Runs) > 0 {
			r := sc.Runs[0]
			for _, x := range sc.Runs { // the latest that ran, over skipped due times
				if x.State != api.ScheduleSkipped {
					r = x
					break
				}
			}
			last = r.State + " " + ago(r.StartedAt, now)
			if r.Summary != nil {
				outliers = fmt.Sprint(len(r.Summary.Outliers))
				if v := r.Summary.SLO; v != nil {
					slo = "pass"
					if !v.Pass {
						slo = fmt.Sprintf("FAIL %d/%d", v.Failed, v.Checks)
					}
				}
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sc.ID, sc.Suite, sc.Every, opts, sc.NextAt.UTC().Format(time.RFC3339), last, slo, outliers)
	}
	return tw.Flush()
}

func newScheduleRunsCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	var limit int
	cmd := &cobra.Command{
		Use:   "runs ID",
		Short: "A schedule's history: each due time's state, reason, runs, outliers and SLO verdict",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			runs, err := cl.ScheduleRuns(cmd.Context(), args[0], limit)
			if err != nil {
				return fmt.Errorf("schedule %s: %w", args[0], err)
			}
			if ok, err := rf.out.print(st.Out, runs); ok {
				return err
			}
			tw := rf.out.table(st.Out)
			fmt.Fprintln(tw, "#\tSTATE\tDUE\tTOOK\tRUNS\tPAIRS\tOUTLIERS\tSLO\tREASON")
			for _, r := range runs {
				took, pairs, outliers, slo := "-", "-", "-", "-"
				if r.FinishedAt != nil {
					took = r.FinishedAt.Sub(r.StartedAt).Round(100 * time.Millisecond).String()
				}
				if s := r.Summary; s != nil {
					pairs, outliers = fmt.Sprint(s.Pairs), fmt.Sprint(len(s.Outliers))
					if s.SLO != nil {
						slo = "pass"
						if !s.SLO.Pass {
							slo = fmt.Sprintf("FAIL %d/%d", s.SLO.Failed, s.SLO.Checks)
						}
					}
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.DueAt.UTC().Format(time.RFC3339), took, len(r.RunIDs), pairs, outliers, slo, orDash(r.Reason))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "how many, newest first (1-1000)")
	rf.register(cmd)
	return cmd
}

func newScheduleDeleteCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a schedule and its history (its runs stay; a run of it going is cancelled)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			sc, err := cl.DeleteSchedule(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("delete schedule %s: %w", args[0], err)
			}
			if ok, err := rf.out.printData(st.Out, sc); ok {
				return err
			}
			_, err = fmt.Fprintf(st.Out, "deleted schedule %s (%s every %s)\n", sc.ID, sc.Suite, sc.Every)
			return err
		},
	}
	rf.register(cmd)
	return cmd
}
