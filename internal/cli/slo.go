package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/mesh"
	"github.com/cnperf/cnperf/internal/suite"
)

// newSLOCommand is `cnperf slo check`: the availability objectives of an
// SLO file, evaluated on the ping mesh's rounds the server stored.
func newSLOCommand(st Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "slo", Short: "Evaluate SLO files that need no run (the ping mesh's availability)"}
	var srv reportServer
	var file string
	var out outputFlags
	check := &cobra.Command{
		Use:   "check --slo FILE",
		Short: "Check availability objectives (success >= 99.9 % over 1h) against the server's stored ping-mesh rounds",
		Long: `Read an SLO file of availability objectives ("success >= 99.9 % over 1h",
optionally with a connection: the mesh's path kind) and evaluate each on
the rounds of the ping mesh the server stored in the window (cnperf
server --mesh-interval): the echo requests answered over those sent. A
failed objective exits with code 3; so does one whose window holds no
round, or whose rounds cover less than half of it. Objectives on rows
are refused here: they need a run (cnperf run SUITE --slo FILE).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if file == "" {
				return fmt.Errorf("no SLO file: give --slo FILE")
			}
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("--slo: %w", err)
			}
			objs, err := suite.ParseSLOs(data, suites())
			if err != nil {
				return fmt.Errorf("--slo %s: %w", file, err)
			}
			if err := suite.OnlyAvailability(objs); err != nil {
				return fmt.Errorf("--slo %s: %w", file, err)
			}
			c, err := srv.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), srv.timeout)
			defer cancel()
			now := time.Now()
			checks := suite.EvaluateAvailability(objs, func(w time.Duration, conn string) (suite.MeshAvailability, error) {
				return mesh.Availability(ctx, c, w, now, conn)
			})
			if ok, err := out.printData(st.Out, struct {
				Checks []suite.Check `json:"checks"`
			}{checks}); err != nil {
				return err
			} else if !ok {
				for _, c := range checks {
					fmt.Fprintln(st.Out, c.Line())
				}
			}
			return sloError(checks)
		},
	}
	srv.register(check)
	check.Flags().StringVar(&file, "slo", "", "SLO file of availability objectives")
	out.register(check)
	cmd.AddCommand(check)
	return cmd
}
