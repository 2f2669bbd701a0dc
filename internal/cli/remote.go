package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api/client"
)

// remoteFlags are the flags of the verbs that call a server as a user.
type remoteFlags struct {
	server, token, caFile string
	serverName            string
	asJSON                bool
}

func (f *remoteFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", envOr("CNPERF_SERVER", ""), "server URL (default $CNPERF_SERVER)")
	fl.StringVar(&f.token, "token", envOr("CNPERF_TOKEN", ""), "user token (default $CNPERF_TOKEN)")
	fl.StringVar(&f.caFile, "ca-file", envOr("CNPERF_CA_FILE", ""), "PEM file of the CA an https:// server's certificate must chain to (default: the system pool)")
	fl.StringVar(&f.serverName, "tls-server-name", envOr("CNPERF_TLS_SERVER_NAME", ""), "name the server's certificate must carry when it is not the URL's host, e.g. cnperf-server.cnperf.svc for an address or a port-forward (env CNPERF_TLS_SERVER_NAME)")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
}

// client returns an API client, or an error naming what is missing.
func (f *remoteFlags) client() (*client.Client, error) {
	if f.server == "" {
		return nil, fmt.Errorf("no server: set --server or CNPERF_SERVER (e.g. http://127.0.0.1:8080)")
	}
	if f.token == "" {
		return nil, fmt.Errorf("no token: set --token or CNPERF_TOKEN (the server's user token)")
	}
	return client.New(f.server, f.token, client.WithCAFile(f.caFile), client.WithServerName(f.serverName))
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
