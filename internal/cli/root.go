// Package cli holds cnperf's command-line verbs, one file each. Every verb
// is a thin layer that turns flags into options for a library package in
// internal/; nothing here measures, stores or schedules by itself.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// Streams are the command's standard input and outputs.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// StdStreams returns the process's standard streams.
func StdStreams() Streams { return Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr} }

// ExitError carries a specific exit code (for example an SLO that failed).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Main runs cnperf with args and returns the process exit code. SIGINT and
// SIGTERM cancel the command's context.
func Main(args []string, st Streams) int { return mainWith(Run, "cnperf", args, st) }

// mainWith runs run (cnperf's or the kubectl plugin's command tree) and
// turns its error into an exit code.
func mainWith(run func(context.Context, []string, Streams) error, name string, args []string, st Streams) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, args, st); err != nil {
		fmt.Fprintf(st.Err, "%s: %v\n", name, err)
		var ee *ExitError
		if errors.As(err, &ee) {
			return ee.Code
		}
		return 1
	}
	return 0
}

// globalOptions are flags every verb shares.
type globalOptions struct {
	logLevel string
	logJSON  bool
}

func (g *globalOptions) logger(st Streams) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if g.logJSON {
		return slog.New(slog.NewJSONHandler(st.Err, opts))
	}
	return slog.New(slog.NewTextHandler(st.Err, opts))
}

// Run parses args and runs the chosen verb.
func Run(ctx context.Context, args []string, st Streams) error {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "cnperf",
		Short: "Network performance and QoS testing for container networks",
	}
	setUpRoot(root, g, st)
	root.AddCommand(
		newRespondCommand(g, st),
		newProbeCommand(g, st),
		newLabCommand(g, st),
		newServerCommand(g, st),
		newAgentCommand(g, st),
		newClientsCommand(st),
		newAgentsCommand(st),
		newTaskCommand(st),
		newRunCommand(g, st),
		newReportCommand(g, st, nil),
		newCompareCommand(g, st, nil),
		newEvaluateCommand(g, st),
		newQoSCommand(st),
		newK8sCommand(g, st),
		newImageCommand(st),
		newVersionCommand(st),
		newSuitesCommand(st),
		newScheduleCommand(st),
		newSLOCommand(st),
		newMatrixCommand(st),
		// Verbs of other areas are added here, one line each.
	)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// setUpRoot gives a top-level command (cnperf's, kubectl cnperf's) what
// every one has: quiet usage and errors (mainWith prints them), the
// version, the global --log-level and --log-json, and the streams.
func setUpRoot(root *cobra.Command, g *globalOptions, st Streams) {
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.Version = readBuildInfo().String()
	root.SetVersionTemplate("{{.Version}}\n")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", envOr("CNPERF_LOG_LEVEL", "info"), "log level: debug, info, warn, error")
	root.PersistentFlags().BoolVar(&g.logJSON, "log-json", false, "write logs as JSON")
	root.SetIn(st.In)
	root.SetOut(st.Out)
	root.SetErr(st.Err)
}

// envOr returns the environment variable's value, or def when unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
