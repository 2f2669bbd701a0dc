package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/stamp"
)

func newRespondCommand(g *globalOptions, st Streams) *cobra.Command {
	var (
		listen, stampKeyFile string
		withStamp, stateless bool
		requireKey           bool
		keyFile              string
		stampPort            int
	)
	cmd := &cobra.Command{
		Use:   "respond",
		Short: "Serve every probe kind (tcp, udp, rr) on one TCP+UDP port, and STAMP with --stamp",
		Long: `Serve every probe kind (tcp, udp, rr) on one TCP+UDP port.

It is open to any client, like iperf3 -s, unless given --require-key: then
only sessions whose client gives one of --key-file's keys (cnperf probe
--key-file) are served, and iperf3 clients get iperf3's error state ("test
authorization failed"). Agents' responders always require a key: the one
the server gives each task.

With --stamp it is also a STAMP Session-Reflector (RFC 8762, with the RFC 8972
TLVs Class of Service, Timestamp Information, Extra Padding and HMAC): on UDP
--stamp-port (862 by default) and on the responder's own UDP port. It is open
(unauthenticated) like a router's reflector unless given --stamp-auth-key-file,
and then answers only test packets whose HMAC verifies.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := g.logger(st)
			r := engine.NewResponder(log, handlers()...)
			if requireKey != (keyFile != "") {
				return fmt.Errorf("--require-key and --key-file go together: --require-key serves only sessions that carry one of --key-file's keys")
			}
			if requireKey {
				keys, err := probe.ReadKeyFile(keyFile)
				if err != nil {
					return err
				}
				r.RequireKeys(probe.NewStaticKeys(keys))
			}
			if !withStamp && (cmd.Flags().Changed("stamp-port") || stampKeyFile != "" || stateless) {
				return fmt.Errorf("--stamp-port, --stamp-auth-key-file and --stamp-stateless need --stamp")
			}
			var refl *stamp.Reflector
			if withStamp {
				if stampPort < 1 || stampPort > 65535 {
					return fmt.Errorf("--stamp-port %d: want 1-65535", stampPort)
				}
				var key []byte
				if stampKeyFile != "" {
					var err error
					if key, err = stamp.ReadKeyFile(stampKeyFile); err != nil {
						return err
					}
				}
				var err error
				refl, err = stamp.NewReflector(stamp.ReflectorOptions{Key: key, Stateless: stateless, Logger: log})
				if err != nil {
					return err
				}
				r.HandleUnclaimed(refl.Unclaimed())
			}
			if err := r.Listen(cmd.Context(), listen); err != nil {
				return err
			}
			access := "open to any client, like iperf3 -s"
			if requireKey {
				access = "only sessions with a key from " + keyFile + "; iperf3 clients refused"
			}
			fmt.Fprintf(st.Out, "cnperf responder listening on %s (tcp and udp; %s)\n", r.Addr(), access)
			if refl == nil {
				return r.Serve(cmd.Context())
			}
			host, _, _ := net.SplitHostPort(listen)
			if err := refl.Listen(cmd.Context(), net.JoinHostPort(host, strconv.Itoa(stampPort))); err != nil {
				r.Close()
				return err
			}
			mode := "open"
			if stampKeyFile != "" {
				mode = "authenticated"
			}
			fmt.Fprintf(st.Out, "STAMP reflector (%s, %s) on udp %s and on the responder's udp port\n", mode, statefulness(stateless), refl.Addr())
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- refl.Serve(ctx) }()
			err := r.Serve(ctx)
			cancel()
			return errors.Join(err, <-errc)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", envOr("CNPERF_LISTEN", ":5201"), "ADDR:PORT to serve on (TCP and UDP)")
	fl.BoolVar(&requireKey, "require-key", false, "serve only tcp, udp and rr sessions whose client gives a key from --key-file (cnperf probe --key-file); iperf3 clients are refused")
	fl.StringVar(&keyFile, "key-file", "", "with --require-key: the accepted keys, one per line (at least 16 bytes each; # comments)")
	fl.BoolVar(&withStamp, "stamp", false, "also reflect STAMP test packets (RFC 8762/8972)")
	fl.IntVar(&stampPort, "stamp-port", stamp.DefaultPort, "UDP port of the STAMP reflector, on --listen's address")
	fl.StringVar(&stampKeyFile, "stamp-auth-key-file", "", "STAMP authenticated mode: HMAC key file (hex, or raw bytes; at least 16 bytes)")
	fl.BoolVar(&stateless, "stamp-stateless", false, "reflect the sender's sequence numbers instead of counting each session's own")
	return cmd
}

func statefulness(stateless bool) string {
	if stateless {
		return "stateless"
	}
	return "stateful"
}
