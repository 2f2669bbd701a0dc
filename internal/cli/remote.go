package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api/client"
)

// serverFlags are the flags of every verb that calls a server as a user:
// where it is, the user token, how to trust its certificate, and the bound
// on each call. One environment variable per role: CNPERF_USER_TOKEN is
// the user token here and for `cnperf server`; CNPERF_TOKEN is still read
// when it is unset (scripts written before the split).
type serverFlags struct {
	server, token, caFile string
	serverName            string
	requestTimeout        time.Duration
	// cluster, when set (kubectl cnperf), reaches the server by
	// port-forward on that cluster instead of --server.
	cluster *k8sFlags
}

// DefaultRequestTimeout bounds each call a user verb makes (kubectl's
// --request-timeout); long polls get their wait on top.
const DefaultRequestTimeout = 30 * time.Second

func (f *serverFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", envOr("CNPERF_SERVER", ""), "server URL (env CNPERF_SERVER)")
	fl.StringVar(&f.token, "token", userTokenEnv(), "user token (env CNPERF_USER_TOKEN, or CNPERF_TOKEN)")
	fl.StringVar(&f.caFile, "ca-file", envOr("CNPERF_CA_FILE", ""), "PEM file of the CA an https:// server's certificate must chain to (default: the system pool)")
	fl.StringVar(&f.serverName, "tls-server-name", envOr("CNPERF_TLS_SERVER_NAME", ""), "name the server's certificate must carry when it is not the URL's host, e.g. cnperf-server.cnperf.svc for an address or a port-forward (env CNPERF_TLS_SERVER_NAME)")
	secondsOrDurationVarP(fl, &f.requestTimeout, "request-timeout", "", DefaultRequestTimeout, "bound on each call to the server (and, with run --k8s, to the Kubernetes API): a duration or seconds; 0: the client's 70 s")
}

// userTokenEnv is the user token from the environment.
func userTokenEnv() string { return envOr("CNPERF_USER_TOKEN", envOr("CNPERF_TOKEN", "")) }

// client returns an API client, or an error naming what is missing.
func (f *serverFlags) client() (*client.Client, error) {
	if f.server == "" {
		return nil, fmt.Errorf("no server: set --server or CNPERF_SERVER (e.g. https://127.0.0.1:8080)")
	}
	if f.token == "" {
		return nil, fmt.Errorf("no token: set --token or CNPERF_USER_TOKEN (the server's user token)")
	}
	c, err := client.New(f.server, f.token, client.WithCAFile(f.caFile), client.WithServerName(f.serverName), client.WithRequestTimeout(f.requestTimeout))
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	return c, nil
}

// connect returns the server's client and what to call when done with
// it: --server's, or with a cluster (kubectl cnperf) one through a
// port-forward to the server pod, with the user token from its Secret
// unless --token gives one.
func (f *serverFlags) connect(ctx context.Context) (*client.Client, func(), error) {
	if f.cluster == nil {
		c, err := f.client()
		return c, func() {}, err
	}
	if f.requestTimeout > 0 {
		f.cluster.timeout = f.requestTimeout // one bound, as run --k8s has it
	}
	kc, err := f.cluster.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	fw, err := kc.ForwardServer(ctx, 30*time.Second)
	if err != nil {
		return nil, nil, err
	}
	token := f.token
	if token == "" {
		if token, _, err = kc.Tokens(ctx); err != nil {
			fw.Close()
			return nil, nil, fmt.Errorf("no --token and %w", err)
		}
	}
	c, err := client.New(fw.URL, token, append(fw.ClientOptions(), client.WithRequestTimeout(f.requestTimeout))...)
	if err != nil {
		fw.Close()
		return nil, nil, err
	}
	return c, func() { fw.Close() }, nil
}

// onCluster makes the verb reach the server of cnperf on the cluster of
// f (kubectl cnperf): --server and its TLS flags are hidden.
func (f *serverFlags) onCluster(cmd *cobra.Command, k *k8sFlags) {
	f.cluster = k
	for _, name := range []string{"server", "ca-file", "tls-server-name"} {
		_ = cmd.Flags().MarkHidden(name)
	}
}

// remoteFlags are the server's flags and the output format, for the verbs
// that list and change things on a server.
type remoteFlags struct {
	serverFlags
	out outputFlags
}

func (f *remoteFlags) register(cmd *cobra.Command) {
	f.serverFlags.register(cmd)
	f.out.register(cmd)
}

// client checks the output format, then returns the server's client.
func (f *remoteFlags) client() (*client.Client, error) {
	if err := f.out.check(); err != nil {
		return nil, err
	}
	return f.serverFlags.client()
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ago formats a time for tables.
func ago(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return t.UTC().Format("2006-01-02T15:04:05Z") + " (" + d.String() + " ago)"
}

// orDash returns s, or "-" when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
