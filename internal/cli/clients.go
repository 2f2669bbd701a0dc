package cli

import (
	"fmt"
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
			if ok, err := rf.out.print(st.Out, cs); ok {
				return err
			}
			tw := rf.out.table(st.Out)
			head := "POD NAME\tPOD UID\tPOD IP\tNODE\tNODE IP\tSTATUS\tLAST HEARTBEAT"
			if rf.out.wide() {
				head += "\tREGISTERED\tID"
			}
			fmt.Fprintln(tw, head)
			now := time.Now()
			for _, c := range cs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s", c.PodName, c.PodUID, c.PodIP, orDash(c.NodeName), orDash(c.NodeIP),
					clientStatus(c.ClientStatus), ago(c.UpdateTime, now))
				if rf.out.wide() {
					fmt.Fprintf(tw, "\t%s\t%d", ago(c.RegisterTime, now), c.ID)
				}
				fmt.Fprintln(tw)
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
