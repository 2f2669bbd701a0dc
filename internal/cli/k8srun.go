package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api/client"
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

// runOnK8s runs the suite on the cluster: it records the cluster's facts,
// port-forwards to the server, reads the user token from the token Secret
// when none is given, lets the suite see only agents whose pods run now,
// and gives the runner the cluster as its environment.
func runOnK8s(ctx context.Context, st Streams, f *suiteFlags, r *suite.Runner, k *k8sRunFlags, token string) error {
	c, err := k.client(ctx)
	if err != nil {
		return err
	}
	st0, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if !st0.Ready() {
		// Deployed but still rolling out (a fresh install, or `helm
		// install --wait`, which counts a DaemonSet done with one pod
		// short under its default maxUnavailable): wait a bounded time,
		// as `kubectl rollout status` would, instead of refusing.
		if !st0.Deployed {
			return fmt.Errorf("cnperf on the cluster is not ready: %s (cnperf k8s status)", st0.NotReady())
		}
		fmt.Fprintf(st.Err, "cnperf on the cluster is not ready yet (%s); waiting up to %v\n", st0.NotReady(), readyWithin)
		if err := c.WaitReady(ctx, readyWithin); err != nil {
			return fmt.Errorf("cnperf on the cluster is not ready: %w (cnperf k8s status)", err)
		}
	}
	// The cluster's facts and, for a suite that may ask for what only a
	// node's kernel can tell (the police action), a look at the nodes,
	// both while the server is reached.
	type factsOut struct {
		facts k8s.Facts
		err   error
	}
	factsc := make(chan factsOut, 1)
	go func() {
		fa, err := c.Facts(ctx, k.cniDir, 2*time.Minute)
		factsc <- factsOut{fa, err}
	}()
	allowNode, err := f.opts.AllowNodeQdisc()
	if err != nil {
		return err
	}
	sets, err := c.AgentSets(ctx)
	if err != nil {
		return err
	}
	env := &k8s.Env{Client: c, CNIConfDir: k.cniDir, AllowNodeQdisc: allowNode, Sets: sets}
	probed := make(chan error, 1)
	go func() {
		var err error
		if u, ok := f.suite.(suite.CapUser); ok {
			err = env.Probe(ctx, u.MayUse()...)
		}
		probed <- err
	}()
	fo := <-factsc
	perr := <-probed
	if fo.err != nil {
		return fmt.Errorf("cluster facts: %w", fo.err)
	}
	if perr != nil {
		return perr
	}
	facts := fo.facts
	fw, err := c.ForwardServer(ctx, 30*time.Second)
	if err != nil {
		return err
	}
	defer fw.Close()
	if token == "" {
		if token, _, err = c.Tokens(ctx); err != nil {
			return fmt.Errorf("no --token and %w", err)
		}
	}
	cl, err := client.New(fw.URL, token, fw.ClientOptions()...)
	if err != nil {
		return err
	}
	live, err := c.Live(ctx)
	if err != nil {
		return err
	}
	env.Server = cl
	liveAPI := k8s.LiveAPI{ServerAPI: cl, Live: live}
	if err := waitAgentsOnline(ctx, st, c, liveAPI); err != nil {
		return err
	}
	r.API, r.Env = liveAPI, env
	rep, err := r.Run(ctx, f.suite, f.opts)
	if err != nil {
		return err
	}
	model, err := report.FromLive(suites(), rep)
	if err != nil {
		return err
	}
	out := k8sOutput{Report: model, Cluster: facts, Kernels: env.Kernels()}
	labelCNI(out.Rows, facts)
	out.Holds = env.Holds()
	if sh := env.Shaped(); len(sh) > 0 {
		out.Shaping, out.Drain = &sh[0], sh[0].Drain
		if len(sh) > 1 {
			out.ShapedPods = sh
		}
	}
	if f.format == "json" {
		f.evaluate(out.Report)
		enc := json.NewEncoder(st.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		return sloError(out.Checks)
	}
	if f.format == "table" {
		printFacts(st, facts)
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

// readyWithin bounds the wait for a deployed cnperf to become ready (its
// server and every agent DaemonSet) before a suite runs on it.
const readyWithin = 2 * time.Minute

// agentsOnlineWithin bounds the wait for the agents of running pods to be
// online at the server before a suite is planned.
const agentsOnlineWithin = 30 * time.Second

// waitAgentsOnline waits until the agent of every running agent pod is
// online at the server (a Ready pod's agent can still be in its reconnect
// back-off, e.g. right after a deploy or a server restart). Agents still
// missing after agentsOnlineWithin are named on stderr and the suite runs
// without them (their connections are left out of the plan).
func waitAgentsOnline(ctx context.Context, st Streams, c *k8s.Client, l k8s.LiveAPI) error {
	missing, err := l.WaitOnline(ctx, agentsOnlineWithin, 500*time.Millisecond)
	if err != nil {
		return fmt.Errorf("list the server's agents: %w", err)
	}
	if len(missing) == 0 {
		return nil
	}
	names := map[string]string{}
	if as, err := c.Agents(ctx); err == nil {
		for _, a := range as {
			names[a.UID] = a.Name + "@" + a.Node
		}
	}
	for i, uid := range missing {
		if n := names[uid]; n != "" {
			missing[i] = n
		}
	}
	fmt.Fprintf(st.Err, "warning: the agents of %d running pod(s) are not online at the server after %v: %s; the suite runs without them (cnperf k8s status; kubectl logs)\n",
		len(missing), agentsOnlineWithin, strings.Join(missing, ", "))
	return nil
}

// labelCNI names the cluster's CNI, its release and its backend in every
// row (`cni`, `cni_version`, `backend`), so rows of runs on different CNIs
// or backends stay apart.
func labelCNI(rows []suite.Row, f k8s.Facts) {
	for i := range rows {
		if f.CNIName != "" {
			if rows[i].Labels == nil {
				rows[i].Labels = map[string]string{}
			}
			rows[i].Labels["cni"] = f.CNIName
			if f.CNIVersion != "" {
				rows[i].Labels["cni_version"] = f.CNIVersion
			}
		}
		if f.Backend != "" {
			rows[i].Backend = f.Backend
		}
	}
}
