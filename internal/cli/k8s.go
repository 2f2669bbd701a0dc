package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/cnperf/cnperf/internal/image"
	"github.com/cnperf/cnperf/internal/k8s"
)

// k8sFlags are the flags every `cnperf k8s` verb shares.
type k8sFlags struct {
	kubeconfig string
	context    string
	namespace  string
	timeout    time.Duration
}

func (f *k8sFlags) add(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default $KUBECONFIG, ~/.kube/config, or in-cluster)")
	cmd.PersistentFlags().StringVar(&f.context, "context", "", "kubeconfig context (default: its current context)")
	cmd.PersistentFlags().StringVarP(&f.namespace, "namespace", "n", k8s.Namespace, "namespace of cnperf's server and agents")
	cmd.PersistentFlags().DurationVar(&f.timeout, "request-timeout", k8s.DefaultRequestTimeout, "bound on each API request")
}

func (f *k8sFlags) client(ctx context.Context) (*k8s.Client, error) {
	return k8s.New(ctx, k8s.Config{Kubeconfig: f.kubeconfig, Context: f.context, Namespace: f.namespace, RequestTimeout: f.timeout})
}

func newK8sCommand(g *globalOptions, st Streams) *cobra.Command {
	f := &k8sFlags{}
	cmd := &cobra.Command{
		Use:   "k8s",
		Short: "Deploy cnperf on a Kubernetes cluster, remove it, show its state",
	}
	f.add(cmd)
	cmd.AddCommand(newK8sDeployCommand(f, st), newK8sUndeployCommand(f, st), newK8sStatusCommand(f, st), newK8sCertsCommand(f, st),
		newK8sInspectNodeCommand(st), newK8sIflinkCommand(st), newK8sDetectTCCommand(st))
	return cmd
}

func newK8sDeployCommand(f *k8sFlags, st Streams) *cobra.Command {
	var o k8s.DeployOptions
	var pull string
	var wait time.Duration
	var di deployImage
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "Apply deploy/kubernetes (server, agents, RBAC) and wait until everything is ready",
		Long: "Applies the manifests of deploy/kubernetes/base with server-side apply, creates the\n" +
			"cnperf-tokens Secret with random tokens when it is missing, and waits until the server\n" +
			"and an agent of every DaemonSet on every node are ready. With --tls (the default) the\n" +
			"server answers HTTPS only (as the kustomize base): the deploy keeps a CA in the namespace and a\n" +
			"serving certificate for cnperf-server, cnperf-server.NS, .NS.svc and .NS.svc.cluster.local\n" +
			"(and the nodes' addresses with --node-port); a re-deploy keeps the CA and re-issues the\n" +
			"serving certificate when its names change or less than 30 days of it are left.\n" +
			"The image is this cnperf's release (" + image.Repository + ":VERSION), --image, or with\n" +
			"--push REGISTRY/REPO[:TAG] an image of this binary (and each --binary) pushed there and\n" +
			"deployed by digest; --image-pull-secret NAME makes the pods pull with that Secret, which\n" +
			"--create-image-pull-secret writes from the local Docker config's credentials.\n\n" +
			"By default every pod runs under Pod Security restricted (the namespace is labelled so):\n" +
			"agents without capabilities or host network give the pod rows of baseline, matrix, rr,\n" +
			"STAMP, ping and capacity. --host-agents adds a host-network agent per node (node-to-node\n" +
			"rows, shaping's read-back of the CNI's qdiscs); --qos-agents gives the agents NET_ADMIN\n" +
			"and NET_RAW (the QoS suites' qdiscs). Either labels the namespace privileged.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.ImagePullPolicy = corev1.PullPolicy(pull)
			if err := di.check(o); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			c, err := f.client(cmd.Context())
			if err != nil {
				return err
			}
			if err := di.resolve(cmd.Context(), &o, st.Err); err != nil {
				return err
			}
			if err := c.Deploy(cmd.Context(), o, wait, st.Out); err != nil {
				return err
			}
			if wait > 0 {
				fmt.Fprintln(st.Out, "cnperf is ready")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Image, "image", "", "image of server and agents (default: this cnperf's release, "+image.Repository+":VERSION)")
	cmd.Flags().StringVar(&di.push, "push", "", "push an image of this cnperf to REGISTRY/REPO[:TAG] (see cnperf image push) and deploy it by digest")
	cmd.Flags().StringVar(&o.ImagePullSecret, "image-pull-secret", "", "pods pull the image with this Secret (type kubernetes.io/dockerconfigjson) of the namespace")
	cmd.Flags().BoolVar(&di.createSecret, "create-image-pull-secret", false, "write --image-pull-secret from the local Docker config's credentials for the image's registry")
	di.pf.add(cmd.Flags())
	cmd.Flags().StringVar(&pull, "image-pull-policy", "", "Always, Never (for images imported with ctr) or IfNotPresent")
	cmd.Flags().Int32Var(&o.NodePort, "node-port", 0, "expose the server on this NodePort (30000-32767; the seed used 30001)")
	cmd.Flags().StringVar(&o.PostgresSecret, "postgres-secret", "", "use PostgreSQL: Secret in namespace cnperf whose key dsn holds the DSN")
	cmd.Flags().BoolVar(&o.TLS, "tls", true, "serve HTTPS only: keep a CA (Secret "+k8s.CASecret+") and a serving certificate for the Service's names (Secret "+k8s.ServingSecret+"), re-issued when its names or expiry need it; agents verify it with the CA certificate alone (ConfigMap "+k8s.CABundle+"); --tls=false serves plain HTTP")
	cmd.Flags().DurationVar(&wait, "wait", 3*time.Minute, "wait this long for readiness (0: do not wait)")
	cmd.Flags().BoolVar(&o.HostAgents, "host-agents", false, "opt in: a host-network agent per node (node-to-node rows); labels the namespace Pod Security privileged")
	cmd.Flags().BoolVar(&o.QoSAgents, "qos-agents", false, "opt in: agents with NET_ADMIN and NET_RAW as uid 0 (the QoS suites' qdiscs); labels the namespace Pod Security privileged")
	return cmd
}

// newK8sCertsCommand makes or renews the TLS material alone, for the
// kustomize overlay and the Helm chart's existing-Secret mode.
func newK8sCertsCommand(f *k8sFlags, st Streams) *cobra.Command {
	var nodePort bool
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Make or renew the CA and the server's certificate in the namespace (for the kustomize base or the chart's tls.existingSecret)",
		Long: "Does what `cnperf k8s deploy --tls` does to the TLS material and nothing else: keeps a CA in\n" +
			"Secret " + k8s.CASecret + ", its certificate alone in ConfigMap " + k8s.CABundle + ", and a serving\n" +
			"certificate in Secret " + k8s.ServingSecret + " for the Service's names (with --node-port also the\n" +
			"nodes' addresses), re-issued when its names change or less than 30 days are left. The namespace\n" +
			"must exist. Then `kubectl apply -k deploy/kubernetes/base` or `helm install ... --set\n" +
			"tls.existingSecret=cnperf-server-tls`. A server that is running reads a renewed certificate within a minute or so.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client(cmd.Context())
			if err != nil {
				return err
			}
			hosts, err := c.TLSHosts(cmd.Context(), nodePort)
			if err != nil {
				return err
			}
			_, err = c.EnsureTLS(cmd.Context(), hosts, time.Now(), st.Out)
			return err
		},
	}
	cmd.Flags().BoolVar(&nodePort, "node-port", false, "the server is a NodePort: name the nodes' addresses in the certificate too")
	return cmd
}

func newK8sUndeployCommand(f *k8sFlags, st Streams) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "undeploy",
		Short: "Remove everything cnperf deployed (the cnperf namespace, test pods included)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client(cmd.Context())
			if err != nil {
				return err
			}
			return c.Undeploy(cmd.Context(), wait, st.Out)
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 2*time.Minute, "wait this long for the namespace to disappear")
	return cmd
}

func newK8sStatusCommand(f *k8sFlags, st Streams) *cobra.Command {
	var facts bool
	var cniDir string
	var format outputFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the server, the agents per node, and (with --facts) the cluster's facts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := format.check(); err != nil {
				return err
			}
			c, err := f.client(cmd.Context())
			if err != nil {
				return err
			}
			s, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			out := struct {
				Deployed   bool           `json:"deployed"`
				Ready      bool           `json:"ready"`
				Server     k8s.Workload   `json:"server"`
				DaemonSets []k8s.Workload `json:"daemonsets"`
				Agents     []k8s.Agent    `json:"agents"`
				Facts      *k8s.Facts     `json:"facts,omitempty"`
			}{s.Deployed, s.Ready(), s.Server, s.DaemonSets, s.Agents, nil}
			if facts {
				fc, err := c.Facts(cmd.Context(), cniDir, 2*time.Minute)
				if err != nil {
					return err
				}
				out.Facts = &fc
			}
			if ok, err := format.print(st.Out, out); ok {
				return err
			}
			prose := format.prose(st)
			if !s.Deployed {
				fmt.Fprintln(prose, s.NotReady())
				return nil
			}
			fmt.Fprintf(prose, "%s\n\n", s.NotReady())
			tw := format.table(st.Out)
			fmt.Fprintln(tw, "AGENT\tNODE\tIP\tHOST NETWORK\tREADY")
			for _, a := range s.Agents {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%v\n", a.Name, a.Node, a.IP, a.HostNetwork, a.Ready)
			}
			tw.Flush()
			if out.Facts != nil {
				printFacts(&format, tw, st, *out.Facts)
			}
			return nil
		},
	}
	format.register(cmd)
	cmd.Flags().BoolVar(&facts, "facts", false, "also record the cluster's facts (runs an inspector pod on one node)")
	cmd.Flags().StringVar(&cniDir, "cni-conf-dir", k8s.DefaultCNIConfDir, "the nodes' CNI configuration directory")
	return cmd
}

// printFacts writes the cluster's facts: a line of prose, then the nodes'
// table to tw.
func printFacts(out *outputFlags, tw tableWriter, st Streams, f k8s.Facts) {
	cni := f.CNI
	if f.CNIName != "" && !strings.HasPrefix(cni, f.CNIName) {
		cni = f.CNIName + "; " + cni // the conflist's own name is not the CNI's
	}
	if f.CNIVersion != "" {
		cni = strings.Replace(cni, f.CNIName, f.CNIName+" "+f.CNIVersion, 1)
	}
	if f.Backend != "" {
		cni += ", backend " + f.Backend
	}
	prose := out.prose(st)
	fmt.Fprintf(prose, "\nkubernetes %s, kube-proxy mode %s, CNI %s\n", f.KubernetesVersion, f.ProxyMode, cni)
	fmt.Fprintf(prose, "pod MTU %d, node MTU %d, kernel %s\n", f.PodMTU, f.NodeMTU, f.Kernel)
	fmt.Fprintln(tw, "NODE\tINTERNAL IP\tPOD CIDR\tKUBELET\tRUNTIME\tREADY")
	for _, n := range f.Nodes {
		cidr := ""
		if len(n.PodCIDRs) > 0 {
			cidr = n.PodCIDRs[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\n", n.Name, n.InternalIP, cidr, n.KubeletVersion, n.ContainerRuntime, n.Ready)
	}
	tw.Flush()
}

// newK8sInspectNodeCommand is what inspector pods run: it reports the
// node namespace's kernel, kube-proxy mode, CNI configuration, MTUs and
// qdiscs as JSON, on stdout and in the termination message kubelet reads.
func newK8sInspectNodeCommand(st Streams) *cobra.Command {
	var o k8s.InspectOptions
	var termLog string
	cmd := &cobra.Command{
		Use:    "inspect-node",
		Short:  "Report this network namespace's qdiscs, MTUs, CNI and kube-proxy mode as JSON (run by inspector pods)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := k8s.InspectLocal(cmd.Context(), o)
			if err != nil {
				writeTermination(termLog, err.Error())
				return err
			}
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			writeTermination(termLog, string(b))
			fmt.Fprintln(st.Out, string(b))
			return nil
		},
	}
	cmd.Flags().IntVar(&o.Ifindex, "ifindex", 0, "only this link (and where its filters redirect)")
	cmd.Flags().StringVar(&o.CNIConfDir, "cni-conf-dir", "", "CNI configuration directory to read")
	cmd.Flags().StringVar(&o.ProxyMetrics, "proxy-metrics", "127.0.0.1:10249", "kube-proxy's metrics address")
	cmd.Flags().StringVar(&o.NodeIP, "node-ip", envOr("NODE_IP", ""), "the node's IP, to find its link (default $NODE_IP)")
	cmd.Flags().StringVar(&termLog, "termination-log", "/dev/termination-log", "file kubelet reads the answer from")
	return cmd
}

// newK8sIflinkCommand prints the interface index of a veth's peer (run by
// the init container of shaped agents: the pod's eth0 names its host-side
// veth).
func newK8sIflinkCommand(st Streams) *cobra.Command {
	var termLog string
	cmd := &cobra.Command{
		Use:    "iflink LINK",
		Short:  "Print the index of a veth's peer link (run by shaped agents' init containers)",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := k8s.PeerIndex(args[0])
			if err != nil {
				writeTermination(termLog, err.Error())
				return err
			}
			writeTermination(termLog, strconv.Itoa(n))
			fmt.Fprintln(st.Out, n)
			return nil
		},
	}
	cmd.Flags().StringVar(&termLog, "termination-log", "/dev/termination-log", "file kubelet reads the answer from")
	return cmd
}

// newK8sDetectTCCommand tries the police action's features on scratch
// devices in this network namespace and reports what the kernel refused
// as JSON (run by detect pods on a cluster's nodes).
func newK8sDetectTCCommand(st Streams) *cobra.Command {
	var termLog string
	cmd := &cobra.Command{
		Use:    "detect-tc",
		Short:  "Try the police action on scratch devices and report what the kernel lacks as JSON (run by detect pods)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			b, err := json.Marshal(k8s.DetectLocal(ctx))
			if err != nil {
				return err
			}
			writeTermination(termLog, string(b))
			fmt.Fprintln(st.Out, string(b))
			return nil
		},
	}
	cmd.Flags().StringVar(&termLog, "termination-log", "/dev/termination-log", "file kubelet reads the answer from")
	return cmd
}

// writeTermination writes msg where kubelet reads a container's
// termination message; outside a pod the file does not exist and nothing
// is written.
func writeTermination(path, msg string) {
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(msg)
}
