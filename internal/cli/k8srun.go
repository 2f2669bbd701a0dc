package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/k8s"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// k8sRunFlags are `cnperf run`'s flags for running on a Kubernetes cluster.
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
	fl.DurationVar(&k.timeout, "request-timeout", k8s.DefaultRequestTimeout, "with --k8s: bound on each API request")
	fl.StringVar(&k.cniDir, "cni-conf-dir", k8s.DefaultCNIConfDir, "with --k8s: the nodes' CNI configuration directory (for the cluster's facts)")
}

// k8sOutput is a suite's output with the cluster's facts (and, for
// shaping, the qdiscs the CNI installed).
type k8sOutput struct {
	suite.Output
	Cluster k8s.Facts     `json:"cluster"`
	Shaping *k8sShapingAt `json:"shaping_qdiscs,omitempty"`
	// Drain is the unthrottled flow that emptied the CNI's token bucket
	// before the shaping flows (see k8s.DrainSuite).
	Drain *suite.Row `json:"shaping_drain,omitempty"`
}

type k8sShapingAt struct {
	Pod         string       `json:"pod"`
	Node        string       `json:"node"`
	Annotations k8sBandwidth `json:"annotations"`
	Links       []k8s.LinkTC `json:"links"`
}

type k8sBandwidth struct {
	Ingress string `json:"kubernetes.io/ingress-bandwidth,omitempty"`
	Egress  string `json:"kubernetes.io/egress-bandwidth,omitempty"`
}

// runOnK8s runs the suite on the cluster: it records the cluster's facts,
// port-forwards to the server, reads the user token from the token Secret
// when none is given, lets the suite see only agents whose pods run now,
// and for shaping starts a pod with the bandwidth annotations and reads
// back the qdiscs the CNI installed.
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
		return fmt.Errorf("cnperf on the cluster is not ready: %s (cnperf k8s status)", st0.NotReady())
	}
	facts, err := c.Facts(ctx, k.cniDir, 2*time.Minute)
	if err != nil {
		return fmt.Errorf("cluster facts: %w", err)
	}
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
	cl, err := client.New(fw.URL, token)
	if err != nil {
		return err
	}
	live, err := c.Live(ctx)
	if err != nil {
		return err
	}
	api := k8s.LiveAPI{API: cl, Live: live}
	s := f.suite
	out := k8sOutput{Cluster: facts}
	if s.Name() == shaping.SuiteName {
		if _, ok := f.opts.Set["burst"]; ok {
			return errors.New("--set burst: on Kubernetes the CNI bandwidth plugin chooses the burst; it is read back, not set")
		}
		so := k8s.ShapingOptions{Ingress: f.opts.Set["ingress-bandwidth"], Egress: f.opts.Set["egress-bandwidth"], CNIConfDir: k.cniDir}
		if so.Ingress == "" && so.Egress == "" {
			so.Egress = "10M"
			if f.opts.Set == nil {
				f.opts.Set = map[string]string{}
			}
			f.opts.Set["egress-bandwidth"] = so.Egress
		}
		if _, err := shaping.OptionsFrom(f.opts); err != nil {
			return err
		}
		sh, err := c.PrepareShaping(ctx, cl, so) // the server's own list: the shaped pod is new
		if sh.Agent.Pod != nil {
			defer c.DeletePod(context.WithoutCancel(ctx), sh.Agent.Pod.Name) //nolint:errcheck // undeploy removes leftovers
		}
		if err != nil {
			return err
		}
		for _, b := range burstsOf(sh.Links) {
			f.opts.Set["burst"] = b
		}
		if _, err := shaping.OptionsFrom(f.opts); err != nil {
			delete(f.opts.Set, "burst") // a burst the suite cannot label: keep its default label
		}
		live[string(sh.Agent.Pod.UID)] = true
		api.Live = live
		api.Only = map[string]bool{string(sh.Agent.Pod.UID): true, sh.PeerUID: true}
		s = k8s.CNIShaping{}
		out.Shaping = &k8sShapingAt{Pod: sh.Agent.Pod.Name, Node: sh.Agent.Node,
			Annotations: k8sBandwidth{Ingress: so.Ingress, Egress: so.Egress}, Links: sh.Links}
		drainOpts := suite.Options{Time: 3 * time.Second, Repeat: 1}
		dr := &suite.Runner{API: api, Progress: r.Progress, Log: r.Log}
		rep, err := dr.Run(ctx, k8s.DrainSuite{Shaped: string(sh.Agent.Pod.UID), Peer: sh.PeerUID, Ingress: so.Egress == ""}, drainOpts)
		if err != nil {
			return fmt.Errorf("drain the CNI's token bucket: %w", err)
		}
		if len(rep.Rows) > 0 {
			out.Drain = &rep.Rows[0]
		}
	}
	r.API = api
	rep, err := r.Run(ctx, s, f.opts)
	if err != nil {
		return err
	}
	out.Output = suite.NewOutput(rep)
	if out.Shaping != nil {
		relabelBurst(out.Rows, out.Shaping.Links)
	}
	if f.format == "json" {
		if len(f.objectives) > 0 {
			out.Checks = suite.Evaluate(f.objectives, out.Rows)
		}
		enc := json.NewEncoder(st.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
		if len(out.Checks) > 0 && !suite.AllPass(out.Checks) {
			return &ExitError{Code: ExitSLOFailed, Err: errors.New("SLO failed")}
		}
		return nil
	}
	if f.format == "table" {
		printFacts(st, facts)
		if out.Shaping != nil {
			fmt.Fprintf(st.Out, "\nqdiscs the CNI installed for %s on %s:\n  %s\n", out.Shaping.Pod, out.Shaping.Node,
				strings.Join(k8s.DescribeQdiscs(out.Shaping.Links), "\n  "))
			if out.Drain != nil {
				fmt.Fprintf(st.Out, "token bucket drained first by one unthrottled TCP flow: %.1f Mbit/s at the receiver over %v\n",
					out.Drain.Median["throughput_bps.receiver"]/1e6, 3*time.Second)
			}
		}
		fmt.Fprintln(st.Out)
	}
	return f.print(st, out.Output)
}

// relabelBurst puts the burst the CNI's tbf really has into the shaping
// rows when the suite could not take it as a setting (containerd's burst
// is far beyond what the suite's own shaper accepts): the rows then show
// the kernel's burst, not the suite's default label.
func relabelBurst(rows []suite.Row, links []k8s.LinkTC) {
	var burst uint32
	for _, l := range links {
		for _, q := range l.Qdiscs {
			if q.Kind == "tbf" && q.Burst > burst {
				burst = q.Burst
			}
		}
	}
	if burst == 0 {
		return
	}
	for i := range rows {
		if _, ok := rows[i].Labels[shaping.LabelBurst]; !ok {
			continue
		}
		rows[i].Labels[shaping.LabelBurst] = fmt.Sprintf("%.0fMB (CNI)", float64(burst)/1e6)
		for _, m := range []map[string]float64{rows[i].Median, rows[i].Min, rows[i].Max} {
			if m != nil {
				m["burst_bytes"] = float64(burst)
			}
		}
	}
}

// burstsOf returns the tbf bursts found, in bytes.
func burstsOf(links []k8s.LinkTC) []string {
	var out []string
	for _, l := range links {
		for _, q := range l.Qdiscs {
			if q.Kind == "tbf" && q.Burst > 0 {
				out = append(out, fmt.Sprint(q.Burst))
			}
		}
	}
	return out
}
