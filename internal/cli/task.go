package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
)

func newTaskCommand(st Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Create, get and list tasks on a server",
	}
	cmd.AddCommand(newTaskCreateCommand(st), newTaskGetCommand(st), newTaskListCommand(st), newTaskRawCommand(st))
	return cmd
}

// maxTaskFile bounds a task file.
const maxTaskFile = api.MaxBody

func newTaskCreateCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	var file string
	cmd := &cobra.Command{
		Use:   "create -f FILE",
		Short: "Create tasks from a JSON file (- for stdin)",
		Long: `Create tasks from a JSON file. The file holds either the seed's task list, a
JSON array of {src_pod_uid, src_pod_ip, dst_pod_uid, dst_pod_ip, task_param,
task_type} (task types ping, iperf, iperf3, traceroute), or a v2 run:
{"tasks": [{"src": POD, "dst": POD, "spec": {"kind": "tcp", ...}}, ...]}.
Prints the new task ids.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("no task file: give -f FILE (or -f - for stdin)")
			}
			data, err := readTaskFile(file, st.In)
			if err != nil {
				return err
			}
			cl, err := rf.client()
			if err != nil {
				return err
			}
			return createTasks(cmd.Context(), cl, data, &rf.out, st)
		},
	}
	rf.register(cmd)
	cmd.Flags().StringVarP(&file, "file", "f", "", "JSON task file (- for stdin)")
	return cmd
}

func readTaskFile(file string, in io.Reader) ([]byte, error) {
	var r io.Reader = in
	name := "stdin"
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("task file: %w", err)
		}
		defer f.Close()
		r, name = f, file
	}
	data, err := io.ReadAll(io.LimitReader(r, maxTaskFile+1))
	if err != nil {
		return nil, fmt.Errorf("read task file %s: %w", name, err)
	}
	if len(data) > maxTaskFile {
		return nil, fmt.Errorf("task file %s: larger than %d bytes", name, maxTaskFile)
	}
	return data, nil
}

// createTasks sends a v1 task list or a v2 run, checked locally first with
// the same strict decoding the server uses.
func createTasks(ctx context.Context, cl *client.Client, data []byte, out *outputFlags, st Streams) error {
	trimmed := bytes.TrimSpace(data)
	switch {
	case bytes.HasPrefix(trimmed, []byte("[")):
		var tcs []api.TaskCreate
		if err := api.DecodeBytes(trimmed, &tcs); err != nil {
			return fmt.Errorf("task file: %w", err)
		}
		if err := api.ValidateTaskCreates(tcs, nil); err != nil {
			return fmt.Errorf("task file: %w", err)
		}
		ids, err := cl.CreateTasks(ctx, tcs)
		if err != nil {
			return fmt.Errorf("create tasks: %w", err)
		}
		if ok, err := out.printData(st.Out, ids); ok {
			return err
		}
		for _, id := range ids {
			fmt.Fprintln(st.Out, id)
		}
		return nil
	case bytes.HasPrefix(trimmed, []byte("{")):
		var rc api.RunCreate
		if err := api.DecodeBytes(trimmed, &rc); err != nil {
			return fmt.Errorf("task file: %w", err)
		}
		run, err := cl.CreateRun(ctx, rc)
		if err != nil {
			return fmt.Errorf("create run: %w", err)
		}
		if ok, err := out.printData(st.Out, run); ok {
			return err
		}
		fmt.Fprintf(st.Out, "run %s\n", run.ID)
		for _, t := range run.Tasks {
			fmt.Fprintln(st.Out, t.TaskID)
		}
		return nil
	}
	return errors.New("task file: want a JSON array of v1 tasks or a JSON object of a v2 run")
}

func newTaskGetCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	var wait bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Show a task and its result (--wait: until it ends)",
		Long: `Show a task: its state, times, reason and result. With --wait, poll until the
task ends (at most --timeout) and exit with status 3 unless it succeeded.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var t api.TaskV2
			if wait {
				wctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				t, err = cl.WaitTask(wctx, args[0], 500*time.Millisecond)
			} else {
				t, err = cl.GetTask(ctx, args[0])
			}
			if err != nil {
				return err
			}
			var ok bool
			if ok, err = rf.out.printData(st.Out, t); !ok {
				err = printTask(st.Out, t)
			}
			if err == nil && wait && t.State != api.StateSucceeded {
				return &ExitError{Code: 3, Err: fmt.Errorf("task %s ended %s: %s", t.TaskID, t.State, t.Reason)}
			}
			return err
		},
	}
	rf.register(cmd)
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the task ends")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "longest wait with --wait")
	return cmd
}

func printTask(w io.Writer, t api.TaskV2) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	tp := func(p *time.Time) string {
		if p == nil {
			return "-"
		}
		return p.UTC().Format(time.RFC3339Nano)
	}
	row("Task", t.TaskID)
	if t.RunID != "" {
		row("Run", t.RunID)
	}
	row("Type", t.Type)
	if t.Param != "" {
		row("Param", t.Param)
	}
	if len(t.Spec) > 0 {
		row("Spec", string(t.Spec))
	}
	row("Source", t.SrcPodUID+" ("+t.SrcPodIP+")")
	row("Destination", t.DstPodUID+" ("+t.DstPodIP+")")
	row("State", fmt.Sprintf("%s (TaskStatus %d)", t.State, api.TaskStatusCode(t.State)))
	if t.Reason != "" {
		row("Reason", t.Reason)
	}
	row("Created", t.CreatedAt.UTC().Format(time.RFC3339Nano))
	row("Dispatched", tp(t.DispatchedAt))
	row("Started", tp(t.StartedAt))
	row("Finished", tp(t.FinishedAt))
	row("Deadline", tp(t.Deadline))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(t.Result) > 0 {
		fmt.Fprintf(w, "Result:\n%s\n", t.Result)
	}
	if t.RawSize > 0 {
		fmt.Fprintf(w, "Raw output: %d bytes (cnperf task raw %s)\n", t.RawSize, t.TaskID)
	}
	return nil
}

func newTaskRawCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "raw ID",
		Short: "Print a task's raw tool output",
		Long: `Print a task's raw tool output (what ping, iperf, iperf3 or traceroute
printed) as the server stored it, apart from the typed result that
` + "`cnperf task get`" + ` shows. Nothing is printed for a task without one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			if f := rf.out.format; !rf.out.structured() && f != "csv" && f != "markdown" {
				_, err = cl.TaskRaw(cmd.Context(), args[0], st.Out)
				return err
			}
			// -o json and the like: the raw output as a field (the
			// server bounds what it keeps).
			var raw bytes.Buffer
			if _, err := cl.TaskRaw(cmd.Context(), args[0], &raw); err != nil {
				return err
			}
			_, err = rf.out.printData(st.Out, map[string]string{"task_id": args[0], "raw": raw.String()})
			return err
		},
	}
	rf.register(cmd)
	return cmd
}

func newTaskListCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	var q client.TaskQuery
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks (filters: --run, --state, --agent, --type; paging: --limit, --after)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			page, err := cl.ListTasks(cmd.Context(), q)
			if err != nil {
				return err
			}
			if ok, err := rf.out.print(st.Out, page); ok {
				return err
			}
			tw := rf.out.table(st.Out)
			fmt.Fprintln(tw, "TASK ID\tTYPE\tSOURCE\tDESTINATION\tSTATE\tCREATED\tREASON")
			for _, t := range page.Tasks {
				typ := t.Type
				if t.Type == api.TypeProbe {
					typ = "probe/" + specKind(t.Spec)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.TaskID, typ, t.SrcPodIP, t.DstPodIP, t.State,
					t.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"), orDash(t.Reason))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			prose := rf.out.prose(st)
			fmt.Fprintf(prose, "%d of %d tasks", len(page.Tasks), page.Total)
			if page.NextAfter != 0 {
				fmt.Fprintf(prose, "; next page: --after %d", page.NextAfter)
			}
			fmt.Fprintln(prose)
			return nil
		},
	}
	rf.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&q.Run, "run", "", "only tasks of this run")
	fl.StringVar(&q.State, "state", "", "only tasks in this state (pending, dispatched, running, succeeded, failed, timed_out, cancelled)")
	fl.StringVar(&q.Agent, "agent", "", "only tasks whose source or destination is this pod uid")
	fl.StringVar(&q.Type, "type", "", "only tasks of this type (probe, ping, iperf, iperf3, traceroute)")
	fl.IntVar(&q.Limit, "limit", 0, "page size (1-1000; default 100)")
	fl.Int64Var(&q.After, "after", 0, "next page after this task number (printed at the end of a page)")
	return cmd
}

// specKind reads the kind out of a probe spec.
func specKind(spec []byte) string {
	var s struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(spec, &s); err != nil || s.Kind == "" {
		return "?"
	}
	return s.Kind
}
