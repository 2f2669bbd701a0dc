package cli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/lab"
	"github.com/cnperf/cnperf/internal/probe"
)

// labFlags are the flags shared by the lab verbs.
type labFlags struct {
	name, stateDir string
}

func (f *labFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "name", envOr("CNPERF_LAB_NAME", lab.DefaultName), "lab name (lowercase letters and digits)")
	cmd.Flags().StringVar(&f.stateDir, "state-dir", envOr("CNPERF_LAB_STATE_DIR", lab.DefaultStateDir), "directory of the labs' state files")
}

func newLabCommand(g *globalOptions, st Streams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Build and remove an emulated cluster network from namespaces (needs root)",
		Long: `The lab builds a cluster's network on this machine from network namespaces:
an underlay bridge the nodes meet on (10.170.0.0/24), one namespace per node
with a bridge cni0 for its pod CIDR (10.244.K.0/24), and one namespace per pod.
Nodes reach each other's pods by host-gw routes or VXLAN (like Flannel).`,
	}
	cmd.AddCommand(newLabUpCommand(g, st), newLabDownCommand(g, st), newLabStatusCommand(st), newLabExecCommand(st), newLabRunCommand(g, st), newLabEvaluateCommand(g, st))
	return cmd
}

func newLabUpCommand(g *globalOptions, st Streams) *cobra.Command {
	var (
		lf                   labFlags
		cfg                  lab.Config
		rate, podCIDR, under string
		nodeRates            []string
		withCnperf           bool
		out                  outputFlags
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Build a lab",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			if err := lab.CheckPrivileges(); err != nil {
				return err
			}
			cfg.Name, cfg.StateDir = lf.name, lf.stateDir
			if err := underlayRates(&cfg, rate, nodeRates); err != nil {
				return err
			}
			for _, c := range []struct {
				flag, val string
				dst       *netip.Prefix
			}{{"--pod-cidr", podCIDR, &cfg.PodCIDR}, {"--underlay-cidr", under, &cfg.UnderlayCIDR}} {
				if c.val == "" {
					continue
				}
				p, err := netip.ParsePrefix(c.val)
				if err != nil {
					return fmt.Errorf("%s %q: want a CIDR like 10.244.0.0/16", c.flag, c.val)
				}
				*c.dst = p
			}
			l, err := lab.Up(cmd.Context(), cfg, g.logger(st))
			if err != nil {
				return err
			}
			if withCnperf {
				if _, err := l.StartCnperf(cmd.Context(), lab.CnperfOptions{HostAgents: true}); err != nil {
					_, derr := l.Down(context.WithoutCancel(cmd.Context()))
					return errors.Join(err, derr, fmt.Errorf("lab %s removed again", l.Name))
				}
			}
			if ok, err := out.print(st.Out, l.Status()); ok {
				return err
			}
			printLab(&out, st, l.Status())
			fmt.Fprintf(out.prose(st), "\nremove it with: cnperf lab down --name %s\n", l.Name)
			return nil
		},
	}
	lf.register(cmd)
	fl := cmd.Flags()
	fl.IntVar(&cfg.Nodes, "nodes", lab.DefaultNodes, "number of nodes")
	fl.IntVar(&cfg.PodsPerNode, "pods-per-node", lab.DefaultPodsPerNode, "pods on each node")
	fl.StringVar(&cfg.Backend, "backend", lab.BackendHostGW, "pod network backend: host-gw or vxlan")
	fl.BoolVar(&cfg.VXLANInheritTOS, "vxlan-inherit-tos", false, "VXLAN outer header copies the inner TOS (vxlan backend)")
	fl.StringVar(&rate, "underlay-rate", "", "limit each node's underlay link, e.g. 1G or 10G (bits/s); default no limit")
	fl.IntVar(&cfg.MTU, "mtu", lab.DefaultMTU, "underlay MTU (pods get MTU-50 on vxlan)")
	fl.StringArrayVar(&nodeRates, "node-underlay-rate", nil, "limit one node's underlay link both ways, NODE=RATE (n3=100M); repeatable")
	fl.StringVar(&cfg.UnderlaySegmentation, "underlay-segmentation", lab.SegmentHost, "where the underlay segments: host (veths pass 64 KB batches) or nic (TSO/GSO off on the underlay, MTU-sized packets as a NIC puts on its wire)")
	fl.StringVar(&podCIDR, "pod-cidr", "", "pod CIDR, one /24 per node (default 10.244.0.0/16)")
	fl.StringVar(&under, "underlay-cidr", "", "node network (default 10.170.0.0/24)")
	out.register(cmd)
	fl.BoolVar(&withCnperf, "cnperf", true, "start the cnperf server in the underlay and an agent in every pod and node")
	return cmd
}

func newLabDownCommand(g *globalOptions, st Streams) *cobra.Command {
	var lf labFlags
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Remove a lab: its processes, namespaces and state, also leftovers of a crashed run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := lab.CheckPrivileges(); err != nil {
				return err
			}
			rep, err := lab.Down(cmd.Context(), lf.name, lf.stateDir, g.logger(st))
			if err != nil {
				return err
			}
			fmt.Fprintf(st.Out, "lab %s removed: %d namespaces, %d processes stopped\n", rep.Name, len(rep.Namespaces), len(rep.ProcessesKilled))
			if len(rep.Leftovers) > 0 {
				how := "not in its state file"
				if !rep.StateFound {
					how = "no state file was found"
				}
				fmt.Fprintf(st.Out, "cleaned %d leftover namespaces found by the prefix %s (%s)\n", len(rep.Leftovers), lab.Prefix(rep.Name), how)
			}
			return nil
		},
	}
	lf.register(cmd)
	return cmd
}

func newLabStatusCommand(st Streams) *cobra.Command {
	var (
		lf  labFlags
		out outputFlags
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a lab's nodes, pods, addresses and processes",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			if err := out.check(); err != nil {
				return err
			}
			rep, err := lab.Status(lf.name, lf.stateDir)
			if err != nil {
				return err
			}
			if ok, err := out.print(st.Out, rep); ok {
				return err
			}
			printLab(&out, st, rep)
			return nil
		},
	}
	lf.register(cmd)
	out.register(cmd)
	return cmd
}

func newLabExecCommand(st Streams) *cobra.Command {
	var lf labFlags
	cmd := &cobra.Command{
		Use:   "exec [--name NAME] POD|NODE|underlay -- CMD [ARGS...]",
		Short: "Run a command inside a pod's, a node's or the underlay's namespace",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("usage: cnperf lab exec [--name NAME] POD -- CMD [ARGS...] (the command goes after --)")
			}
			if err := lab.CheckPrivileges(); err != nil {
				return err
			}
			l, err := lab.Open(lf.name, lf.stateDir)
			if err != nil {
				return err
			}
			err = l.Exec(cmd.Context(), args[0], args[1:], st.In, st.Out, st.Err)
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code := ee.ExitCode()
				if code < 0 {
					code = 1
				}
				return &ExitError{Code: code, Err: fmt.Errorf("%s in %s: %w", args[1], args[0], err)}
			}
			return err
		},
	}
	lf.register(cmd)
	return cmd
}

// printLab writes a lab's status as tables.
func printLab(out *outputFlags, st Streams, r lab.StatusReport) {
	prose := out.prose(st)
	c := r.Config
	extra := ""
	if c.VXLANInheritTOS {
		extra += ", tos inherit"
	}
	if c.UnderlayRateBps > 0 {
		extra += fmt.Sprintf(", underlay limited to %s", formatBits(c.UnderlayRateBps))
	}
	health := "healthy"
	if !r.Healthy {
		health = "NOT healthy (phase " + r.Phase + ", see exists columns)"
	}
	fmt.Fprintf(prose, "lab %s: %s backend, %d nodes, %d pods, mtu %d%s; %s\n", r.Name, r.Backend, len(r.Nodes), len(r.Pods), c.MTU, extra, health)
	fmt.Fprintf(prose, "underlay: ns %s, %s, server address %s\n", r.Underlay.NS, r.Underlay.Addr, r.Underlay.ServerAddr)
	if r.Cnperf != nil {
		fmt.Fprintf(prose, "cnperf server %s with %d agents; run suites with: cnperf run SUITE --lab %s\n", r.Cnperf.URL, r.Cnperf.Agents, r.Name)
	}
	fmt.Fprintln(prose)
	tw := out.table(st.Out)
	fmt.Fprintln(tw, "NODE\tNAMESPACE\tNODE IP\tPOD CIDR\tEXISTS")
	for _, n := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%v\n", n.Name, n.NS, n.IP.Addr(), n.PodCIDR, n.Exists)
	}
	_ = tw.Flush()
	if len(r.Pods) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "POD\tNODE\tNAMESPACE\tIP\tMTU\tEXISTS")
		for _, p := range r.Pods {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\n", p.Name, p.Node, p.NS, p.IP.Addr(), p.MTU, p.Exists)
		}
		_ = tw.Flush()
	}
	if len(r.Processes) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "PID\tNAMESPACE\tALIVE\tCOMMAND")
		for _, p := range r.Processes {
			fmt.Fprintf(tw, "%d\t%s\t%v\t%s\n", p.PID, p.NS, p.Alive, strings.Join(p.Argv, " "))
		}
		_ = tw.Flush()
	}
	if len(r.Leftovers) > 0 {
		fmt.Fprintf(prose, "\nleftover namespaces not in the state: %s\n", strings.Join(r.Leftovers, ", "))
	}
}

// formatBits writes a rate in bit/s with a unit.
func formatBits(bps uint64) string {
	switch {
	case bps >= 1e9 && bps%1e6 == 0:
		return fmt.Sprintf("%g Gbit/s", float64(bps)/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%g Mbit/s", float64(bps)/1e6)
	default:
		return fmt.Sprintf("%d bit/s", bps)
	}
}

// underlayRates sets the lab's underlay limits from --underlay-rate and
// the repeatable --node-underlay-rate NODE=RATE.
func underlayRates(cfg *lab.Config, rate string, nodeRates []string) error {
	if rate != "" {
		r, err := probe.ParseRate(rate)
		if err != nil {
			return fmt.Errorf("--underlay-rate: %w", err)
		}
		cfg.UnderlayRateBps = r
	}
	for _, nr := range nodeRates {
		node, v, ok := strings.Cut(nr, "=")
		if !ok || node == "" {
			return fmt.Errorf("--node-underlay-rate %q: want NODE=RATE, e.g. n3=100M", nr)
		}
		r, err := probe.ParseRate(v)
		if err != nil {
			return fmt.Errorf("--node-underlay-rate %q: %w", nr, err)
		}
		if cfg.NodeUnderlayRates == nil {
			cfg.NodeUnderlayRates = map[string]uint64{}
		}
		cfg.NodeUnderlayRates[node] = r
	}
	return nil
}
