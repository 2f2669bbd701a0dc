package cli

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/iperf3wire"
	"github.com/cnperf/cnperf/internal/probe/stamp"
)

// probeFlags are the flags of `cnperf probe KIND`.
type probeFlags struct {
	to, source            string
	duration, interval    time.Duration
	timeout, histWidth    time.Duration
	streams, size, count  int
	window, mss, histBins int
	maxTTL                int
	reverse, asJSON       bool
	rate, proto           string
	dscp, tos             string
	peer                  string
	offload               string
	authKeyFile           string
	keyFile               string
	out                   outputFlags // -o; --json is -o json
	jsonStream            bool
}

func newProbeCommand(g *globalOptions, st Streams) *cobra.Command {
	f := &probeFlags{}
	cmd := &cobra.Command{
		Use:   "probe KIND --to HOST:PORT",
		Short: "Run one probe (tcp, udp, rr, ping, trace, stamp) and print its result",
		Long: `Run one measurement against a cnperf responder (tcp, udp, rr), a host
(ping, trace) or a STAMP Session-Reflector (stamp: RFC 8762, default port 862;
any cnperf responder port reflects STAMP too) and print a summary like
iperf3's or ping's, or the JSON result.

Ctrl-C (SIGINT) or SIGTERM stops any probe (--peer iperf3 too) and prints
the summary of what was measured until then; the exit status is then
iperf3's (1), except ping's, which is ping's (0 when replies came back).
trace prints each hop as it completes, as traceroute.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := f.run(cmd, args[0], g, st)
			var measured *ExitError // a result was printed, then judged
			if err != nil && f.jsonStream && !errors.As(err, &measured) {
				_ = (&jsonStream{w: st.Out}).event("error", err.Error())
				return err
			}
			if err != nil && f.out.format == "json" && !errors.As(err, &measured) {
				// As iperf3 -J: a failure is a JSON document on stdout
				// too, so a script reading stdout always gets one.
				_ = printJSON(st.Out, map[string]string{"error": err.Error()})
			}
			return err
		},
	}
	f.register(cmd)
	return cmd
}

// run runs the probe the flags ask for and prints its result.
func (f *probeFlags) run(cmd *cobra.Command, kind string, g *globalOptions, st Streams) error {
	if err := f.out.check(); err != nil {
		return err
	}
	if f.asJSON {
		if f.out.format != "" && f.out.format != "json" {
			return fmt.Errorf("--json and -o %s: give one", f.out.format)
		}
		f.out.format = "json"
	}
	spec, err := f.spec(cmd, kind)
	if err != nil {
		return err
	}
	var stream *jsonStream
	if f.jsonStream {
		if f.out.format != "" {
			return fmt.Errorf("--json-stream and -o %s: give one", f.out.format)
		}
		if spec.Kind != probe.KindTCP && spec.Kind != probe.KindUDP && (spec.Kind != probe.KindRR || f.peer == "iperf3") {
			return fmt.Errorf("--json-stream: only tcp, udp and rr probes report intervals")
		}
		f.out.format = "json-stream" // no live text lines
		stream = &jsonStream{w: st.Out}
		if err := stream.event("start", map[string]any{"kind": spec.Kind, "target": spec.Target, "request": spec.Request()}); err != nil {
			return err
		}
	}
	// Interval reports, as iperf3's lines or --json-stream's events.
	var onInterval func(probe.Interval)
	switch {
	case f.intervalReportsOff(cmd.Flags(), spec.Kind):
	case stream != nil:
		onInterval = func(iv probe.Interval) { _ = stream.event("interval", map[string]any{"sum": iv}) }
	case f.live():
		onInterval = func(iv probe.Interval) { fmt.Fprintln(st.Out, probe.FormatInterval(iv)) }
	}
	var res *probe.Result
	switch f.peer {
	case "iperf3":
		if f.keyFile != "" {
			return fmt.Errorf("--key-file: iperf3's protocol has no place for a test key")
		}
		if f.authKeyFile != "" {
			return fmt.Errorf("--auth-key-file: only stamp probes are authenticated")
		}
		res, err = iperf3wire.Run(cmd.Context(), spec, onInterval)
	case "", "cnperf":
		env := probe.Env{Logger: g.logger(st)}
		if f.authKeyFile != "" {
			if spec.Kind != probe.KindStamp {
				return fmt.Errorf("--auth-key-file: only stamp probes are authenticated")
			}
			if env.AuthKey, err = stamp.ReadKeyFile(f.authKeyFile); err != nil {
				return err
			}
		}
		if f.keyFile != "" {
			switch spec.Kind {
			case probe.KindTCP, probe.KindUDP, probe.KindRR:
			default:
				return fmt.Errorf("--key-file: only tcp, udp and rr sessions carry a test key")
			}
			keys, err := probe.ReadKeyFile(f.keyFile)
			if err != nil {
				return err
			}
			env.TestKey = keys[0]
		}
		env.OnInterval = onInterval
		if f.live() {
			env.OnHop = func(h probe.Hop) { fmt.Fprintln(st.Out, probe.FormatHop(h)) }
			env.OnReply = func(r probe.Reply) {
				if spec.Kind == probe.KindStamp {
					fmt.Fprintf(st.Out, "%d bytes from %s: stamp_seq=%d time=%.3f ms\n", r.Bytes, r.From, r.Seq, r.RTTms)
					return
				}
				fmt.Fprintf(st.Out, "%d bytes from %s: icmp_seq=%d time=%.3f ms\n", r.Bytes, r.From, r.Seq+1, r.RTTms)
			}
		}
		res, err = probers().Run(cmd.Context(), spec, env)
	default:
		err = fmt.Errorf("--peer %q: want cnperf (a cnperf responder) or iperf3 (a stock iperf3 -s)", f.peer)
	}
	if err != nil {
		return err
	}
	if stream != nil {
		if err := stream.event("end", res); err != nil {
			return err
		}
	} else if ok, err := f.out.printData(st.Out, res); err != nil {
		return err
	} else if !ok {
		if _, err := fmt.Fprint(st.Out, probe.FormatSummary(res)); err != nil {
			return err
		}
	}
	if noReplies(res) {
		// As ping(8): exit 1 when nothing came back.
		return &ExitError{Code: 1, Err: fmt.Errorf("%s %s: no replies (100 %% loss)", res.Kind, spec.Target)}
	}
	if cmd.Context().Err() != nil && res.Kind != probe.KindPing {
		// Interrupted (SIGINT, SIGTERM): the summary of what was
		// measured is printed; the exit status is iperf3's, 1. ping
		// exits as ping(8) does, 0 when replies came back.
		return &ExitError{Code: 1, Err: fmt.Errorf("interrupt - the %s probe was stopped after %.2f s", res.Kind, res.DurationS)}
	}
	return nil
}

// live reports whether lines are printed as the probe runs (the text
// output; -o json, yaml, csv and markdown print the result alone).
func (f *probeFlags) live() bool {
	return f.out.format == "" || f.out.format == "table" || f.out.format == "wide"
}

// noReplies reports a ping or stamp result in which every packet was lost.
func noReplies(res *probe.Result) bool {
	if res == nil || (res.Kind != probe.KindPing && res.Kind != probe.KindStamp) {
		return false
	}
	if res.Packets != nil && res.Packets.Sent > 0 {
		return res.Packets.Received == 0
	}
	return res.LossPct != nil && *res.LossPct >= 100
}

func (f *probeFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.to, "to", "", "responder HOST:PORT (tcp, udp, rr), HOST (ping, trace) or HOST[:PORT] (stamp, default port 862)")
	fl.StringVar(&f.source, "source", "", "local address to bind")
	secondsOrDurationVarP(fl, &f.duration, "time", "t", 0, "test duration: 10s, 500ms, or seconds as in iperf3's -t (default 10s; ping/rr: until --count)")
	secondsOrDurationVarP(fl, &f.interval, "interval", "i", 0, "interval reports (tcp, udp; default 1s, >= 100ms; -i 0 prints none, as iperf3), packet interval (ping, stamp: default 10ms) or gap between transactions (rr, which reports each second or each gap if longer); seconds as in iperf3's and ping's -i")
	fl.DurationVar(&f.timeout, "timeout", 0, "bound on each wait for the peer")
	fl.IntVarP(&f.streams, "streams", "P", 0, "parallel streams (tcp; a udp probe runs one: for iperf3's -u -P add --peer iperf3, which cnperf's responder serves too)")
	fl.BoolVarP(&f.reverse, "reverse", "R", false, "the responder sends, this side receives")
	fl.StringVarP(&f.rate, "rate", "b", "", "target rate per stream in bits/s with k, M, G suffixes, as iperf3's -b (-P 2 -b 100M: 200 Mbit/s in all); 0 = as fast as possible")
	byteSizeVarP(fl, &f.size, "size", "l", 0, "bytes per datagram, write, request, echo or STAMP test packet (K, M: 1024, 1024², as iperf3's -l; default tcp 128K as iperf3, udp 1400 where iperf3 takes the path's MSS)")
	fl.StringVar(&f.proto, "proto", "", "rr transport: tcp, udp or crr")
	countVarP(fl, &f.count, "count", "c", "packets (ping, stamp) or transactions (rr), as ping's -c; not iperf3's -c (the peer is --to)")
	fl.StringVar(&f.authKeyFile, "auth-key-file", "", "stamp: authenticated mode with the HMAC key in this file (hex, or raw bytes; at least 16 bytes)")
	fl.StringVar(&f.keyFile, "key-file", "", "tcp, udp, rr: the test key (the file's first key) for a responder that serves only keyed sessions (`cnperf respond --require-key`)")
	fl.StringVar(&f.dscp, "dscp", "", "DSCP name (EF, AF41, CS1) or number 0-63")
	fl.StringVarP(&f.tos, "tos", "S", "", "TOS byte (0x10, 16 or octal 020), as iperf3's -S/--tos")
	fl.StringVar(&f.offload, "offload", "", "udp: auto (segmentation/receive offload where the kernel has it) or off (real datagrams on the path)")
	byteSizeVarP(fl, &f.window, "window", "w", 0, "socket buffer bytes (K, M: 1024, 1024², as iperf3's -w)")
	fl.IntVarP(&f.mss, "mss", "M", 0, "TCP maximum segment size")
	fl.DurationVar(&f.histWidth, "hist-bin", 0, "latency histogram bin width (e.g. 5us)")
	fl.IntVar(&f.histBins, "hist-bins", 0, "latency histogram bin count")
	fl.IntVar(&f.maxTTL, "max-ttl", 0, "traceroute: highest TTL")
	fl.BoolVarP(&f.asJSON, "json", "J", false, "print the result as JSON (-o json), as iperf3's -J")
	fl.BoolVar(&f.jsonStream, "json-stream", false, `tcp, udp (--peer iperf3 too), rr: one JSON object a line as the probe runs, as iperf3's --json-stream: {"event": "start"|"interval"|"end"|"error", "data": ...}`)
	f.out.registerOutput(cmd)
	fl.StringVar(&f.peer, "peer", "cnperf", "what listens at --to: cnperf (a cnperf responder) or iperf3 (a stock iperf3 -s; tcp and udp)")
}

// spec turns the flags into a probe spec; only flags the user set are
// carried, so each kind's defaults apply to the rest.
func (f *probeFlags) spec(cmd *cobra.Command, kindArg string) (probe.Spec, error) {
	kind, err := probe.ParseKind(kindArg)
	if err != nil {
		return probe.Spec{}, err
	}
	s := probe.Spec{
		Kind: kind, Target: f.to, Source: f.source,
		Duration: probe.Duration(f.duration), Interval: probe.Duration(f.interval),
		Timeout: probe.Duration(f.timeout), Streams: f.streams, Reverse: f.reverse,
		Size: f.size, Proto: f.proto, Count: f.count, WindowBytes: f.window, MSS: f.mss,
		HistBinWidth: probe.Duration(f.histWidth), HistBins: f.histBins, MaxTTL: f.maxTTL,
		Offload: f.offload,
	}
	if s.Target == "" {
		return s, fmt.Errorf("--to is required (responder HOST:PORT, or HOST for ping and trace)")
	}
	if cmd.Flags().Changed("rate") {
		r, err := probe.ParseRate(f.rate)
		if err != nil {
			return s, err
		}
		// -b is per stream, as iperf3 counts it; a spec's rate is the
		// total over its streams.
		if s.Streams > 1 && r > 0 {
			if r > math.MaxUint64/uint64(s.Streams) {
				return s, fmt.Errorf("--rate %s: times %d streams is out of range", f.rate, s.Streams)
			}
			r *= uint64(s.Streams)
		}
		s.RateBps = &r
	}
	if f.dscp != "" && f.tos != "" {
		return s, fmt.Errorf("give --dscp or --tos, not both")
	}
	if f.dscp != "" {
		d, err := probe.ParseDSCP(f.dscp)
		if err != nil {
			return s, err
		}
		tos := d << 2
		s.TOS = &tos
	}
	if f.tos != "" {
		t, err := probe.ParseTOS(f.tos)
		if err != nil {
			return s, err
		}
		s.TOS = &t
	}
	return s, nil
}
