package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/metrics"
	"github.com/cnperf/cnperf/internal/pgnotify"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/web"
)

func newServerCommand(g *globalOptions, st Streams) *cobra.Command {
	var listen, dsn, userTokenFile, agentTokenFile, userTokenSecret string
	var mo meshFlags
	var lf limitFlags
	var tlsCert, tlsKey, tlsDir string
	var tlsHosts []string
	var plainHTTP, trustAddrs, checkSource bool
	var requireCreds bool
	var minEvery, keepalive time.Duration
	var keepaliveBudget float64
	var pairBudget int
	var rv reviewFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane: the v1 (seed) and v2 APIs, dispatch, reaper, store",
		Long: `Run the control-plane server. Agents heartbeat and fetch tasks from it; users
list clients and create tasks (the seed's /api/v1 endpoints, or /api/v2).

Tokens: CNPERF_USER_TOKEN and CNPERF_AGENT_TOKEN (or --user-token-file and
--agent-token-file); they must differ. The agent token is a join token: an
agent joins with it once and gets a credential of its own, bound to its
pod uid; it cannot speak for an agent that joined (nor, with
--require-agent-credentials, for any agent). On Kubernetes,
--agent-token-review authenticates agents by their projected
ServiceAccount tokens with TokenReview instead; no agent token is needed
then. Store: --db sqlite:PATH (default),
--db postgres://USER@HOST/DB or --db mysql://USER[:PASSWORD]@HOST[:PORT]/DB
(MySQL 8 or MariaDB; mysql://USER@/DB?socket=PATH for a unix socket).
TLS is on by default: with --tls-cert and --tls-key the server serves that
certificate; without them it makes a CA and a serving certificate on its
first start and keeps them in --tls-dir (default: cnperf-tls beside the
SQLite database), logging the CA file and its SHA-256 fingerprint. Agents
and the CLI verify the server with --ca-file (or CNPERF_CA_FILE) naming
that ca.crt. --plain-http serves HTTP instead: tokens then cross the
network in clear, so use it only on loopback or behind a proxy that
terminates TLS. Agents advertise only their own addresses as responders
(a responder_addr must be the heartbeat's pod_ip or node_ip).
--check-agent-source also requires each heartbeat to come from one of
them: off by default, because on Kubernetes a host-network agent reaches
the server's Service from whatever address its route picks (an overlay
device's) and CNIs may masquerade pod traffic. Limits on what a
request may ask: the --max-* and --min-* flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pairBudget < 1 {
				return fmt.Errorf("--metrics-pair-budget %d: want 1 or more", pairBudget)
			}
			userTok, err := readToken("user", "CNPERF_USER_TOKEN", userTokenFile)
			if err != nil {
				return err
			}
			reviewer, err := rv.reviewer()
			if err != nil {
				return err
			}
			agentTok, err := readToken("agent", "CNPERF_AGENT_TOKEN", agentTokenFile)
			if err != nil && (reviewer == nil || agentTokenFile != "") {
				return err
			}
			if err := mo.validate(); err != nil {
				return err
			}
			lim, err := lf.limits()
			if err != nil {
				return err
			}
			tf := tlsFlags{cert: tlsCert, key: tlsKey, dir: tlsDir, hosts: tlsHosts, plain: plainHTTP}
			opts := server.Options{UserToken: userTok, AgentToken: agentTok, AgentReviewer: reviewer, Limits: lim, RequireAgentCredentials: requireCreds,
				ScheduleMinEvery: minEvery, MetricsPairBudget: pairBudget, AgentSourceCheck: checkSource && !trustAddrs,
				SessionKeepalive: keepalive, SessionKeepaliveBudget: keepaliveBudget,
				TokenPlaces: tokenPlaces(userTokenFile, userTokenSecret, os.Getenv("POD_NAMESPACE"))}
			return runServer(cmd.Context(), g, st, listen, dsn, opts, mo, tf)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", envOr("CNPERF_SERVER_LISTEN", ":8080"), "HOST:PORT to serve HTTP on")
	fl.StringVar(&dsn, "db", envOr("CNPERF_DB", "sqlite:cnperf.db"), "store: sqlite:PATH, postgres://... or mysql://...")
	fl.StringVar(&userTokenFile, "user-token-file", "", "file holding the user token (instead of CNPERF_USER_TOKEN)")
	fl.StringVar(&userTokenSecret, "user-token-secret", envOr("CNPERF_USER_TOKEN_SECRET", ""), "the Kubernetes Secret the user token comes from (key user-token, namespace $POD_NAMESPACE), named on the dashboard's login page")
	fl.StringVar(&agentTokenFile, "agent-token-file", "", "file holding the agents' join token (instead of CNPERF_AGENT_TOKEN)")
	fl.BoolVar(&requireCreds, "require-agent-credentials", false, "the join token only joins: it never acts for an agent, not even a seed (v1) client that never joined")
	fl.IntVar(&pairBudget, "metrics-pair-budget", metrics.DefaultPairBudget, "matrix node pairs /metrics exports per schedule (outliers first, then the slowest); every node's aggregates are exported regardless")
	fl.DurationVar(&minEvery, "schedule-min-every", schedule.DefaultMinEvery, "shortest interval a schedule may have (cnperf schedule create --every); lower it only for tests")
	rv.register(cmd)
	mo.register(cmd)
	lf.register(cmd)
	fl.StringVar(&tlsCert, "tls-cert", envOr("CNPERF_TLS_CERT", ""), "serve HTTPS with this PEM certificate (chain); needs --tls-key")
	fl.StringVar(&tlsKey, "tls-key", envOr("CNPERF_TLS_KEY", ""), "the PEM private key of --tls-cert")
	fl.StringVar(&tlsDir, "tls-dir", envOr("CNPERF_TLS_DIR", ""), "without --tls-cert: where the server's own CA and certificate are kept (default: cnperf-tls beside the SQLite database, or in the working directory)")
	fl.StringSliceVar(&tlsHosts, "tls-host", nil, "without --tls-cert: more names or addresses for the server's own certificate (it always names localhost, the host name and the host's addresses)")
	fl.BoolVar(&plainHTTP, "plain-http", envOr("CNPERF_PLAIN_HTTP", "") == "1", "serve plain HTTP, not TLS: bearer tokens cross the network in clear (loopback, or behind a proxy that terminates TLS)")
	fl.BoolVar(&checkSource, "check-agent-source", false, "refuse heartbeats that come from another address than the agent's pod_ip or node_ip (off by default: host-network agents and masquerading CNIs send from other addresses)")
	fl.BoolVar(&trustAddrs, "trust-agent-addrs", false, "accept heartbeats from any address, the default; overrides --check-agent-source")
	fl.DurationVar(&keepalive, "session-keepalive", 0, fmt.Sprintf("keep-alive period asked of agent sessions; 0 scales it with the sessions this server holds, to keep them under --session-keepalive-budget a second (%v to %v)", server.KeepaliveMin, server.KeepaliveMax))
	fl.Float64Var(&keepaliveBudget, "session-keepalive-budget", server.DefaultSessionKeepaliveBudget, "with --session-keepalive 0: the most keep-alives a second this server asks of its sessions")
	return cmd
}

// readToken reads a token from file when given, else from the environment.
func readToken(kind, env, file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read %s token: %w", kind, err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("%s token file %s is empty", kind, file)
		}
		return tok, nil
	}
	tok := strings.TrimSpace(os.Getenv(env))
	if tok == "" {
		return "", fmt.Errorf("no %s token: set %s or --%s-token-file", kind, env, kind)
	}
	return tok, nil
}

// runServer serves opts (its Store, Logger and Probers filled in here)
// until ctx ends.
func runServer(ctx context.Context, g *globalOptions, st Streams, listen, dsn string, opts server.Options, mo meshFlags, tf tlsFlags) error {
	log := g.logger(st)
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	db, err := store.Open(openCtx, dsn)
	cancel()
	if err != nil {
		return err
	}
	// TLS material is made only once the store opened: a server that
	// cannot start leaves no CA behind.
	tlsCfg, err := tf.config(log, listen, dsn)
	if err != nil {
		return errors.Join(err, db.Close())
	}
	opts.Store, opts.Logger, opts.Probers = db, log, probers()
	if opts.ReplicaID == "" {
		opts.ReplicaID = server.NewReplicaID()
	}
	if isPostgres(dsn) {
		// Replicas on one PostgreSQL wake each other's long polls
		// through LISTEN/NOTIFY (docs/control-plane.md, "Replicas").
		opts.Bus = pgnotify.New(dsn, opts.ReplicaID, log)
	}
	srv, err := server.New(opts)
	if err != nil {
		return errors.Join(err, db.Close())
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return errors.Join(fmt.Errorf("server: %w", err), db.Close())
	}
	scheme := "http"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https" // session cookies get Secure (r.TLS is set)
	}
	// Requests get a context that ends at shutdown, so long polls answer.
	reqCtx, stopReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReqs()
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      server.DefaultMaxWait + 30*time.Second,
		IdleTimeout:       120 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
	}
	jobsCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()
	jobsDone := make(chan error, 1)
	go func() { jobsDone <- srv.Run(jobsCtx) }()
	meshDone, err := mo.start(jobsCtx, srv, log) // mesh.go
	if err != nil {
		stopJobs()
		<-jobsDone
		return errors.Join(err, ln.Close(), db.Close())
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	log.Info("server listening", "addr", ln.Addr().String(), "scheme", scheme, "db", redactDSN(dsn), "replica", opts.ReplicaID)

	var errs []error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		errs = append(errs, fmt.Errorf("serve http: %w", err))
	}
	log.Info("server stopping")
	srv.CloseSessions() // a bye to each agent session: they reconnect with jittered back-off
	stopReqs()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("shut down http: %w", err))
	}
	srv.CloseDashboard() // cancels suites started from the dashboard
	stopJobs()
	<-meshDone
	if err := <-jobsDone; err != nil {
		errs = append(errs, fmt.Errorf("final heartbeat flush: %w", err))
	}
	if err := db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close store: %w", err))
	}
	log.Info("server stopped")
	return errors.Join(errs...)
}

// redactDSN hides a password in a postgres:// or mysql:// DSN for logging.
func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn, "@"); at > i {
			cred := dsn[i+3 : at]
			if c := strings.Index(cred, ":"); c >= 0 {
				return dsn[:i+3] + cred[:c] + ":***" + dsn[at:]
			}
		}
	}
	return dsn
}

// isPostgres reports whether dsn names a PostgreSQL database.
func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// tokenPlaces says where this server's user token is kept, for the
// dashboard's login page: the file it read (--user-token-file), the
// Secret its Deployment names (--user-token-secret, set by the manifests
// and the chart), or, for a server started otherwise, where each install
// keeps it.
func tokenPlaces(file, secret, namespace string) []web.TokenPlace {
	if file != "" {
		return []web.TokenPlace{{Install: "This server", Where: "the file " + file + " (its --user-token-file)", Command: "cat " + file}}
	}
	if namespace == "" {
		namespace = k8s.Namespace
	}
	if secret != "" {
		return []web.TokenPlace{{Install: "Kubernetes",
			Where:   fmt.Sprintf("Secret %s (key %s) in namespace %s", secret, k8s.UserTokenKey, namespace),
			Command: k8s.TokenCommand(namespace, secret)}}
	}
	return []web.TokenPlace{
		{Install: "Kubernetes (cnperf k8s deploy, kubectl apply -k, Helm)",
			Where:   fmt.Sprintf("Secret %s (key %s) in cnperf's namespace; with Helm's auth.existingSecret, that Secret", k8s.TokensSecret, k8s.UserTokenKey),
			Command: k8s.TokenCommand(k8s.Namespace, k8s.TokensSecret)},
		{Install: "A lab (cnperf lab up)", Where: "CNPERF_USER_TOKEN in " + lab.DefaultStateDir + "/NAME.d/user.env",
			Command: "sudo grep CNPERF_USER_TOKEN " + lab.DefaultStateDir + "/NAME.d/user.env"},
		{Install: "cnperf server started by hand", Where: "the CNPERF_USER_TOKEN it was started with, or the file its --user-token-file names"},
	}
}
