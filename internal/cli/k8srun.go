package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
)

// k8sRunFlags are `cnperf run`'s flags for running on a Kubernetes
// cluster. Its bound on each Kubernetes API request is run's one
// --request-timeout (serverFlags), set before use.
type k8sRunFlags struct {
	on bool
	k8sFlags
	cniDir string
}

func (k *k8sRunFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&k.on, "k8s", false, "run on the Kubernetes cluster where `cnperf k8s deploy` put cnperf (server reached by port-forward)")
	fl.StringVar(&k.kubeconfig, "kubeconfig", "", "with --k8s: kubeconfig file (default $KUBECONFIG, ~/.kube/config)")
	fl.StringVar(&k.context, "context", "", "with --k8s: kubeconfig context")
	fl.StringVarP(&k.namespace, "namespace", "n", k8s.Namespace, "with --k8s: namespace of cnperf's server and agents")
	fl.StringVar(&k.cniDir, "cni-conf-dir", k8s.DefaultCNIConfDir, "with --k8s: the nodes' CNI configuration directory (for the cluster's facts)")
}

// k8sOutput is a suite's output with the cluster's facts and, where the
// suite shaped a pod, the qdiscs the CNI installed and the flow that
// drained its token bucket first.
type k8sOutput struct {
	*report.Report
	Cluster k8s.Facts        `json:"cluster"`
	Shaping *k8s.Shaped      `json:"shaping_qdiscs,omitempty"`
	Drain   *k8s.DrainResult `json:"shaping_drain,omitempty"`
	// ShapedPods are every shaped pod, in order, when there was more than
	// one (shaping and policing per placement); Shaping is the first.
	ShapedPods []k8s.Shaped `json:"shaped_pods,omitempty"`
	// Kernels is what detect pods found of the police action on the nodes.
	Kernels []k8s.KernelTC `json:"node_kernels,omitempty"`
	// Holds are the qdiscs agents held for the phases (qos-priority's
	// pod-htb and node-htb).
	Holds []k8s.Hold `json:"qos_holds,omitempty"`
}

// runOnK8s runs the suite on the cluster: it opens a session there
// (k8s.Open: facts, port-forward, token, agents online) and gives the
// runner the session's API and Env.
func runOnK8s(ctx context.Context, st Streams, f *suiteFlags, r *suite.Runner, k *k8sRunFlags, token string) error {
	c, err := k.client(ctx)
	if err != nil {
		return err
	}
	allowNode, err := f.opts.AllowNodeQdisc()
	if err != nil {
		return err
	}
	o := k8s.OpenOptions{CNIConfDir: k.cniDir, AllowNodeQdisc: allowNode, Token: token, Notes: st.Err}
	if u, ok := f.suite.(suite.CapUser); ok {
		o.MayUse = u.MayUse()
	}
	sess, err := k8s.Open(ctx, c, o)
	if err != nil {
		return err
	}
	defer sess.Close()
	env, facts := sess.Env, sess.Facts
	r.API, r.Env = sess.API, env
	rep, err := r.Run(ctx, f.suite, f.opts)
	if err != nil {
		return err
	}
	model, err := report.FromLive(suites(), rep)
	if err != nil {
		return err
	}
	out := k8sOutput{Report: model, Cluster: facts, Kernels: env.Kernels()}
	facts.LabelRows(out.Rows)
	out.Holds = env.Holds()
	if sh := env.Shaped(); len(sh) > 0 {
		out.Shaping, out.Drain = &sh[0], sh[0].Drain
		if len(sh) > 1 {
			out.ShapedPods = sh
		}
	}
	if f.format == "json" || f.format == "yaml" {
		f.evaluate(out.Report)
		o := outputFlags{format: f.format}
		if _, err := o.print(st.Out, out); err != nil {
			return err
		}
		return sloError(out.Checks)
	}
	if f.format == "table" {
		var table outputFlags
		printFacts(&table, table.table(st.Out), st, facts)
		if out.Shaping != nil {
			fmt.Fprintf(st.Out, "\nqdiscs the CNI installed for %s on %s:\n  %s\n", out.Shaping.Pod, out.Shaping.Node,
				strings.Join(k8s.DescribeQdiscs(out.Shaping.Links), "\n  "))
			if d := out.Drain; d != nil && d.ThroughputBps != nil {
				fmt.Fprintf(st.Out, "token bucket drained first by one unthrottled TCP flow: %.1f Mbit/s at the receiver\n", d.ThroughputBps.Receiver/1e6)
			}
		}
		fmt.Fprintln(st.Out)
	}
	f.evaluate(out.Report)
	return f.write(st, out.Report)
}
