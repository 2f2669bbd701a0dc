package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api"
)

func newClientsCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "clients",
		Short: "List the online agents (--all: offline ones too)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			cs, err := cl.Clients(cmd.Context(), all)
			if err != nil {
				return err
			}
			if rf.asJSON {
				return printJSON(st.Out, cs)
			}
			tw := tabwriter.NewWriter(st.Out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "POD NAME\tPOD UID\tPOD IP\tNODE\tNODE IP\tSTATUS\tLAST HEARTBEAT")
			now := time.Now()
			for _, c := range cs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.PodName, c.PodUID, c.PodIP, orDash(c.NodeName), orDash(c.NodeIP),
					clientStatus(c.ClientStatus), ago(c.UpdateTime, now))
			}
			return tw.Flush()
		},
	}
	rf.register(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "include offline agents")
	return cmd
}

func clientStatus(code int) string {
	switch code {
	case api.ClientStatusFree:
		return "free"
	case api.ClientStatusBusy:
		return "busy"
	case api.ClientStatusOffline:
		return "offline"
	}
	return fmt.Sprintf("unknown(%d)", code)
}
