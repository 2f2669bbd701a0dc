package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/agent"
	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe/stamp"
)

func newAgentCommand(g *globalOptions, st Streams) *cobra.Command {
	var (
		servers        []string
		token          string
		tokenFile      string
		caFile         string
		serverName     string
		id             agent.Identity
		port, parallel int
		noSession      bool
		stampPort      int
		stateDir       string
	)
	cmd := &cobra.Command{
		Use:   "agent --server URL",
		Short: "Run a test agent: heartbeat, responder, task pool, result delivery",
		Long: `Run a cnperf agent. Its identity comes from the Downward API environment
(POD_NAME, POD_NAMESPACE, POD_UID, POD_IP, NODE_NAME, NODE_IP, and the
node's zone and region from CNPERF_ZONE, CNPERF_REGION); the flags
override it. It keeps a probe responder on POD_IP:--responder-port (which
also reflects STAMP) and a STAMP reflector on POD_IP:--stamp-port, beats
once a second, runs the server's tasks (at most --max-parallel at once) and
delivers every result until the server acknowledges it. With --state-dir
the results not yet delivered are kept on disk (DIR/outbox) and delivered
by the next process after a crash or restart, exactly once.

Authentication: outside Kubernetes CNPERF_AGENT_TOKEN (or --token) is the
server's join token, the variable the server reads it from: the agent joins once and keeps its own credential in
--state-dir/token (0600), which it uses from then on, also after a
restart. On Kubernetes --token-file names a projected ServiceAccount
token, re-read before every request (the kubelet rotates it); no join.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			serverURL := strings.Join(servers, ",")
			if serverURL == "" {
				return fmt.Errorf("no server: set --server or CNPERF_SERVER")
			}
			if token == "" && tokenFile == "" {
				return fmt.Errorf("no token: set CNPERF_AGENT_TOKEN (the server's join token) or --token, or --token-file")
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
			ident.AddNodeLabels(id.NodeLabels) // --node-label wins over the environment, key by key
			if err := ident.Complete(); err != nil {
				return err
			}
			// A long poll waits up to the server's MaxWait; the client's
			// timeout must exceed it.
			copts := []client.Option{client.WithHTTPClient(&http.Client{Timeout: agent.DefaultPollWait + 15*time.Second}), client.WithCAFile(caFile), client.WithServerName(serverName)}
			if tokenFile != "" {
				copts = append(copts, client.WithTokenFile(tokenFile))
			}
			cl, err := client.New(serverURL, token, copts...)
			if err != nil {
				return err
			}
			log := g.logger(st)
			if tokenFile == "" {
				cred, joined, err := joinOnce(cmd.Context(), cl, stateDir, ident.PodUID)
				if err != nil {
					return err
				}
				if joined {
					log.Info("agent joined the server; its credential is kept", "pod_uid", ident.PodUID, "file", filepath.Join(stateDir, agent.CredentialFile))
				}
				cl = cl.WithToken(cred)
			}
			if port == 0 {
				port = -1 // any free port
			}
			if stampPort == 0 {
				stampPort = -1 // none
			}
			a, err := agent.New(agent.Options{
				StampPort: stampPort,
				Client:    cl, Identity: ident, Probers: probers(), Handlers: handlers(),
				ResponderPort: port, MaxParallel: parallel, Version: buildVersion(), Logger: log,
				StateDir: stateDir, NoSession: noSession,
			})
			if err != nil {
				return err
			}
			go func() {
				// Once ready, the pages of the binary that start-up touched
				// (every package's init) leave the agent's RSS.
				select {
				case <-a.Ready():
				case <-cmd.Context().Done():
					return
				}
				if n, err := agent.ReleaseStartupPages(); err != nil {
					log.Debug("startup pages kept", "err", err)
				} else {
					log.Debug("startup pages released", "mapped_bytes", n)
				}
			}()
			return a.Run(cmd.Context())
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&servers, "server", splitList(envOr("CNPERF_SERVER", "")), "server URL, e.g. http://cnperf-server:8080; repeat it (or give a comma list) for replicas: the agent uses the first and moves to the next when it fails")
	fl.StringVar(&caFile, "ca-file", envOr("CNPERF_CA_FILE", ""), "PEM file of the CA an https:// server's certificate must chain to (default: the system pool)")
	fl.StringVar(&serverName, "tls-server-name", envOr("CNPERF_TLS_SERVER_NAME", ""), "name the server's certificate must carry when it is not the URL's host, e.g. cnperf-server.cnperf.svc for an address or a port-forward (env CNPERF_TLS_SERVER_NAME)")
	fl.StringVar(&token, "token", envOr("CNPERF_AGENT_TOKEN", ""), "the server's join token (env CNPERF_AGENT_TOKEN, as for cnperf server)")
	fl.StringVar(&tokenFile, "token-file", envOr("CNPERF_TOKEN_FILE", ""), "read the bearer token from this file before every request (a projected ServiceAccount token on Kubernetes); no join")
	fl.StringVar(&id.PodName, "pod-name", "", "pod name (default $POD_NAME)")
	fl.StringVar(&id.PodNamespace, "pod-namespace", "", "pod namespace (default $POD_NAMESPACE)")
	fl.StringVar(&id.PodUID, "pod-uid", "", "pod UID (default $POD_UID)")
	fl.StringVar(&id.PodIP, "pod-ip", "", "pod IP, where the responder listens (default $POD_IP)")
	fl.StringVar(&id.NodeName, "node-name", "", "node name (default $NODE_NAME)")
	fl.StringVar(&id.NodeIP, "node-ip", "", "node IP (default $NODE_IP)")
	fl.StringToStringVar(&id.NodeLabels, "node-label", nil, "KEY=VALUE label of this node to report for the pair plans by zone, e.g. topology.kubernetes.io/zone=eu-1a (repeat or comma list; added to $CNPERF_NODE_LABELS and to $CNPERF_ZONE, $CNPERF_REGION as topology.kubernetes.io/zone, region, winning key by key)")
	fl.BoolVar(&id.HostNetwork, "host-network", false, "this is the node's host-network agent (pod IP defaults to the node IP)")
	fl.IntVar(&port, "responder-port", agent.DefaultResponderPort, "responder TCP and UDP port (0: any free port)")
	fl.IntVar(&stampPort, "stamp-port", stamp.DefaultPort, "STAMP reflector UDP port (0: none; the responder port reflects STAMP too)")
	fl.StringVar(&stateDir, "state-dir", envOr("CNPERF_STATE_DIR", ""), "directory kept across restarts (an emptyDir in Kubernetes): the agent's credential (file token, 0600; needed to join) and the outbox of undelivered results (default: memory only)")
	fl.BoolVar(&noSession, "no-session", false, "never open an agent session: poll the REST endpoints only (a heartbeat a second and a long poll), as before sessions")
	fl.IntVar(&parallel, "max-parallel", agent.DefaultMaxParallel, "tasks run at once (1-256)")
	return cmd
}

// joinOnce returns the agent's credential (agent.Credential), retrying
// for up to 30 s while the server cannot be reached (it may be starting);
// a refusal (4xx) ends at once.
func joinOnce(ctx context.Context, cl *client.Client, stateDir, uid string) (string, bool, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cred, joined, err := agent.Credential(ctx, cl, stateDir, uid)
		st := api.StatusOf(err)
		if err == nil || (st >= 400 && st < 500) || st == 0 && !isNetworkError(err) || time.Now().After(deadline) {
			return cred, joined, err
		}
		select {
		case <-ctx.Done():
			return "", false, err
		case <-time.After(time.Second):
		}
	}
}

// isNetworkError reports whether err is a failure to reach the server.
func isNetworkError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe)
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
