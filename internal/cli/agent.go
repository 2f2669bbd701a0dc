package cli

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/agent"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe/stamp"
)

func newAgentCommand(g *globalOptions, st Streams) *cobra.Command {
	var (
		serverURL, token string
		caFile           string
		id               agent.Identity
		port, parallel   int
		stampPort        int
		stateDir         string
	)
	cmd := &cobra.Command{
		Use:   "agent --server URL",
		Short: "Run a test agent: heartbeat, responder, task pool, result delivery",
		Long: `Run a cnperf agent. Its identity comes from the Downward API environment
(POD_NAME, POD_NAMESPACE, POD_UID, POD_IP, NODE_NAME, NODE_IP); the flags
override it. It keeps a probe responder on POD_IP:--responder-port (which
also reflects STAMP) and a STAMP reflector on POD_IP:--stamp-port, beats
once a second, runs the server's tasks (at most --max-parallel at once) and
delivers every result until the server acknowledges it. With --state-dir
the results not yet delivered are kept on disk (DIR/outbox) and delivered
by the next process after a crash or restart, exactly once. The token is
CNPERF_TOKEN (the server's agent token) or --token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if serverURL == "" {
				return fmt.Errorf("no server: set --server or CNPERF_SERVER")
			}
			if token == "" {
				return fmt.Errorf("no token: set CNPERF_TOKEN (the server's agent token) or --token")
			}
			// A long poll waits up to the server's MaxWait; the client's
			// timeout must exceed it.
			cl, err := client.New(serverURL, token, client.WithHTTPClient(&http.Client{Timeout: agent.DefaultPollWait + 15*time.Second}),
				client.WithCAFile(caFile))
			if err != nil {
				return err
			}
			ident := agent.IdentityFromEnv(os.LookupEnv)
			fl := cmd.Flags()
			override := func(flag string, dst *string, v string) {
				if fl.Changed(flag) {
					*dst = v
				}
			}
			override("pod-name", &ident.PodName, id.PodName)
			override("pod-namespace", &ident.PodNamespace, id.PodNamespace)
			override("pod-uid", &ident.PodUID, id.PodUID)
			override("pod-ip", &ident.PodIP, id.PodIP)
			override("node-name", &ident.NodeName, id.NodeName)
			override("node-ip", &ident.NodeIP, id.NodeIP)
			ident.HostNetwork = id.HostNetwork
			if port == 0 {
				port = -1 // any free port
			}
			if stampPort == 0 {
				stampPort = -1 // none
			}
			a, err := agent.New(agent.Options{
				StampPort: stampPort,
				Client:    cl, Identity: ident, Probers: probers(), Handlers: handlers(),
				ResponderPort: port, MaxParallel: parallel, Version: buildVersion(), Logger: g.logger(st),
				StateDir: stateDir,
			})
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&serverURL, "server", envOr("CNPERF_SERVER", ""), "server URL, e.g. http://cnperf-server:8080")
	fl.StringVar(&caFile, "ca-file", envOr("CNPERF_CA_FILE", ""), "PEM file of the CA an https:// server's certificate must chain to (default: the system pool)")
	fl.StringVar(&token, "token", envOr("CNPERF_TOKEN", ""), "agent token (default $CNPERF_TOKEN)")
	fl.StringVar(&id.PodName, "pod-name", "", "pod name (default $POD_NAME)")
	fl.StringVar(&id.PodNamespace, "pod-namespace", "", "pod namespace (default $POD_NAMESPACE)")
	fl.StringVar(&id.PodUID, "pod-uid", "", "pod UID (default $POD_UID)")
	fl.StringVar(&id.PodIP, "pod-ip", "", "pod IP, where the responder listens (default $POD_IP)")
	fl.StringVar(&id.NodeName, "node-name", "", "node name (default $NODE_NAME)")
	fl.StringVar(&id.NodeIP, "node-ip", "", "node IP (default $NODE_IP)")
	fl.BoolVar(&id.HostNetwork, "host-network", false, "this is the node's host-network agent (pod IP defaults to the node IP)")
	fl.IntVar(&port, "responder-port", agent.DefaultResponderPort, "responder TCP and UDP port (0: any free port)")
	fl.IntVar(&stampPort, "stamp-port", stamp.DefaultPort, "STAMP reflector UDP port (0: none; the responder port reflects STAMP too)")
	fl.StringVar(&stateDir, "state-dir", envOr("CNPERF_STATE_DIR", ""), "directory kept across restarts (an emptyDir in Kubernetes): the outbox of undelivered results (default: memory only)")
	fl.IntVar(&parallel, "max-parallel", agent.DefaultMaxParallel, "tasks run at once (1-256)")
	return cmd
}
