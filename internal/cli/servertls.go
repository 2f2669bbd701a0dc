package cli

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/certs"
)

// tlsFlags are cnperf server's TLS settings: a given certificate, the
// server's own kept in a directory (the default), or plain HTTP (opt-in).
type tlsFlags struct {
	cert, key, dir string
	hosts          []string
	plain          bool
}

// config returns the server's TLS configuration, nil for plain HTTP.
func (f tlsFlags) config(log *slog.Logger, listen, dsn string) (*tls.Config, error) {
	if f.plain {
		if f.cert != "" || f.key != "" {
			return nil, errors.New("--plain-http and --tls-cert/--tls-key exclude each other")
		}
		log.Warn("serving plain HTTP (--plain-http): bearer tokens cross the network in clear")
		return nil, nil
	}
	if f.cert != "" || f.key != "" {
		return certs.ServerConfig(f.cert, f.key)
	}
	dir := f.dir
	if dir == "" {
		dir = "cnperf-tls"
		if p, ok := strings.CutPrefix(dsn, "sqlite:"); ok && p != ":memory:" {
			dir = filepath.Join(filepath.Dir(p), "cnperf-tls")
		}
	}
	hosts := serverNames(listen, f.hosts)
	k, err := certs.EnsureServer(dir, hosts, time.Now())
	if err != nil {
		return nil, fmt.Errorf("server TLS (--tls-dir %s; --tls-cert/--tls-key to give one, --plain-http for none): %w", dir, err)
	}
	switch {
	case k.MadeCA:
		log.Info("made a CA for this server: give its file to agents and the CLI (--ca-file or CNPERF_CA_FILE)", "ca_file", k.CA, "ca_sha256", k.CASHA256)
	default:
		log.Info("serving TLS with the CA kept", "ca_file", k.CA, "ca_sha256", k.CASHA256)
	}
	if k.Issued && k.Why != "" {
		log.Info("issued a new serving certificate", "cert", k.Cert, "why", k.Why)
	}
	return certs.ServerConfig(k.Cert, k.Key)
}

// serverNames are the names the server's own certificate is for:
// localhost, loopback, the host name, the host's addresses, the listen
// host and extra.
func serverNames(listen string, extra []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(h string) {
		if ip := net.ParseIP(h); ip != nil {
			if ip.IsUnspecified() || ip.IsLinkLocalUnicast() {
				return
			}
			h = ip.String()
		}
		if h != "" && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
		add(h)
	}
	if h, err := os.Hostname(); err == nil {
		add(h)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				add(n.IP.String())
			}
		}
	}
	if h, _, err := net.SplitHostPort(listen); err == nil {
		add(h)
	}
	for _, h := range extra {
		add(strings.TrimSpace(h))
	}
	return out
}
