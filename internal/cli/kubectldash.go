package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/k8s"
)

// newKubectlDashboardCommand is `kubectl cnperf dashboard`: a
// port-forward to the server pod behind a local plain-HTTP address on
// loopback, its URL, and how to read the user token from the Secret.
func newKubectlDashboardCommand(f *k8sFlags, st Streams) *cobra.Command {
	var port int
	var open bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Port-forward to cnperf's server and print the dashboard's URL and how to get the login token",
		Long: `Port-forward to a ready cnperf server pod (as kubectl port-forward does) and
serve it on http://127.0.0.1:PORT until Ctrl-C. A server that serves
HTTPS is verified with the cluster's CA (ConfigMap ` + k8s.CABundle + `), so the
browser talks plain HTTP on loopback only. Log in with the user token: the
command to read it from its Secret is printed. --open starts the desktop's
browser (xdg-open).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 0 || port > 65535 {
				return fmt.Errorf("--port %d: want 0-65535 (0: any free port)", port)
			}
			ctx := cmd.Context()
			kc, err := f.client(ctx)
			if err != nil {
				return err
			}
			fw, err := kc.ForwardServer(ctx, 30*time.Second)
			if err != nil {
				return err
			}
			defer fw.Close()
			hc, err := fw.HTTPClient(0)
			if err != nil {
				return err
			}
			target, err := url.Parse(fw.URL)
			if err != nil {
				return fmt.Errorf("forward URL %q: %w", fw.URL, err)
			}
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				return fmt.Errorf("--port %d: %w", port, err)
			}
			tr, ok := hc.Transport.(*http.Transport)
			if !ok {
				tr = http.DefaultTransport.(*http.Transport).Clone()
			}
			tr.ResponseHeaderTimeout = time.Minute // every page is a bounded call
			hs := &http.Server{Handler: dashboardProxy(target, tr), ReadHeaderTimeout: 10 * time.Second}
			served := make(chan error, 1)
			go func() { served <- hs.Serve(ln) }()
			u := "http://" + ln.Addr().String() + "/"
			secret := kc.UserTokenSecret(ctx)
			fmt.Fprintf(st.Out, "cnperf dashboard of namespace %s (server pod %s): %s\n", kc.NS(), fw.Pod, u)
			fmt.Fprintf(st.Out, "log in with the user token, key %s of Secret %s:\n  %s\n", k8s.UserTokenKey, secret, k8s.TokenCommand(kc.NS(), secret))
			fmt.Fprintln(st.Out, "Ctrl-C ends the port-forward.")
			if open {
				if err := openBrowser(ctx, u); err != nil {
					fmt.Fprintf(st.Err, "note: could not open a browser (%v); open %s yourself\n", err, u)
				}
			}
			select {
			case <-ctx.Done():
			case err = <-served:
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve the dashboard: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", 8080, "local port on 127.0.0.1 (0: any free port)")
	cmd.Flags().BoolVar(&open, "open", false, "open the URL in the desktop's browser (xdg-open)")
	return cmd
}

// dashboardProxy forwards every request to target (the port-forward's
// URL) through tr. The browser speaks plain HTTP on loopback, so the
// session cookie loses its Secure flag, which the server sets when it
// serves HTTPS; the forward's own connection stays verified TLS.
func dashboardProxy(target *url.URL, tr http.RoundTripper) http.Handler {
	p := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		Transport: tr,
		ModifyResponse: func(resp *http.Response) error {
			cookies := resp.Header.Values("Set-Cookie")
			resp.Header.Del("Set-Cookie")
			for _, c := range cookies {
				var kept []string
				for _, part := range strings.Split(c, ";") {
					if !strings.EqualFold(strings.TrimSpace(part), "secure") {
						kept = append(kept, part)
					}
				}
				resp.Header.Add("Set-Cookie", strings.Join(kept, ";"))
			}
			return nil
		},
	}
	return p
}

// openBrowser starts xdg-open with the URL (a fixed argument list, no
// shell) and waits a bounded time for it to hand the URL over.
func openBrowser(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "xdg-open", u).CombinedOutput()
	if err != nil {
		return fmt.Errorf("xdg-open: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
