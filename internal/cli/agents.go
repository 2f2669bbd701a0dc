package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newAgentsCommand holds the verbs that manage agents' identities.
func newAgentsCommand(st Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agents",
		Short: "Manage agents' credentials (revoke, forget)",
	}
	cmd.AddCommand(newAgentsRevokeCommand(st), newAgentsForgetCommand(st))
	return cmd
}

func newAgentsRevokeCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "revoke POD_UID",
		Short: "End an agent's own credential: its calls are refused (401) from now on",
		Long: `Revoke the credential an agent received when it joined with the join token
(POST /api/v2/agents/POD_UID/revoke, user token). The agent's calls are
refused with 401 from then on (within 10 s on other server replicas). The
pod uid stays taken: the join token cannot join it again until an admin
runs cnperf agents forget POD_UID.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			rv, err := cl.RevokeAgent(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("revoke %s: %w", args[0], err)
			}
			if ok, err := rf.out.printData(st.Out, rv); ok {
				return err
			}
			_, err = fmt.Fprintf(st.Out, "revoked the credential of agent %s (issued %s)\n", rv.PodUID, rv.CreatedAt.Format("2006-01-02 15:04:05Z07:00"))
			return err
		},
	}
	rf.register(cmd)
	return cmd
}

func newAgentsForgetCommand(st Streams) *cobra.Command {
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "forget POD_UID",
		Short: "Delete an agent's credential, revoked or not: the uid may join again",
		Long: `Forget the credential of a pod uid (POST /api/v2/agents/POD_UID/forget, user
token), revoked or not. The uid may then join again with the join token:
the way back for a revoked agent (its --state-dir/token file removed and
restarted), and for a uid another agent joined first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := rf.client()
			if err != nil {
				return err
			}
			if err := cl.ForgetAgent(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("forget %s: %w", args[0], err)
			}
			if ok, err := rf.out.printData(st.Out, map[string]any{"pod_uid": args[0], "forgotten": true}); ok {
				return err
			}
			_, err = fmt.Fprintf(st.Out, "forgot the credential of agent %s: it may join again\n", args[0])
			return err
		},
	}
	rf.register(cmd)
	return cmd
}
