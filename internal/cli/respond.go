package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/probe"
)

func newRespondCommand(g *globalOptions, st Streams) *cobra.Command {
	var listen string
	cmd := &cobra.Command{
		Use:   "respond",
		Short: "Serve every probe kind (tcp, udp, rr) on one TCP+UDP port",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger(st)
			r := probe.NewResponder(log, handlers()...)
			if err := r.Listen(cmd.Context(), listen); err != nil {
				return err
			}
			fmt.Fprintf(st.Out, "cnperf responder listening on %s (tcp and udp)\n", r.Addr())
			return r.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&listen, "listen", envOr("CNPERF_LISTEN", ":5201"), "ADDR:PORT to serve on (TCP and UDP)")
	return cmd
}
