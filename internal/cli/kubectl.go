package cli

import (
	"context"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// KubectlPluginName is the file name kubectl finds cnperf's plugin by: the
// cnperf binary, linked or copied under this name on PATH, runs as
// `kubectl cnperf ...`.
const KubectlPluginName = "kubectl-cnperf"

// IsKubectlPlugin reports whether argv0 (the program's name as run) is
// the kubectl plugin's.
func IsKubectlPlugin(argv0 string) bool {
	b := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	return b == KubectlPluginName
}

// KubectlMain runs cnperf as a kubectl plugin with args (what kubectl
// passes after `kubectl cnperf`) and returns the exit code.
func KubectlMain(args []string, st Streams) int {
	return mainWith(RunKubectl, "kubectl cnperf", args, st)
}

// RunKubectl is `kubectl cnperf`: the Kubernetes verbs of cnperf at the
// top level (deploy, undeploy, status, run SUITE on the cluster, report,
// compare, dashboard, version)
// with kubectl's --kubeconfig, --context and -n/--namespace. kubectl hands
// a plugin every argument after its name, so these flags go anywhere after
// `kubectl cnperf`.
func RunKubectl(ctx context.Context, args []string, st Streams) error {
	g := &globalOptions{}
	f := &k8sFlags{}
	root := &cobra.Command{
		Use: "cnperf",
		// Shown as kubectl shows a plugin ("kubectl cnperf run ...").
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl cnperf"},
		Short:       "cnperf on the current Kubernetes cluster: deploy, status, run suites, reports, dashboard",
		Long: `cnperf as a kubectl plugin: the same binary as cnperf, run as kubectl-cnperf.
It works on the cluster of kubectl's configuration (--kubeconfig, --context)
in the namespace cnperf, or the one -n names. Everything else cnperf does is
there as 'cnperf VERB'.`,
		Example: `  kubectl cnperf deploy
  kubectl cnperf status
  kubectl cnperf run baseline
  kubectl cnperf run shaping --set egress-bandwidth=10M --context prod -n netperf
  kubectl cnperf report RUN_ID -o json
  kubectl cnperf compare RUN_A RUN_B
  kubectl cnperf dashboard`,
	}
	setUpRoot(root, g, st)
	f.add(root)
	run := newRunCommand(g, st)
	run.Short = "Run a suite on the cluster's cnperf agents (server reached by port-forward) and print its table"
	if err := run.Flags().Set("k8s", "true"); err != nil {
		return err
	}
	_ = run.Flags().MarkHidden("k8s")
	for _, name := range []string{"server", "lab", "state-dir", "ca-file", "tls-server-name"} {
		_ = run.Flags().MarkHidden(name)
	}
	root.AddCommand(
		newK8sDeployCommand(f, st),
		newK8sUndeployCommand(f, st),
		newK8sStatusCommand(f, st),
		run,
		newReportCommand(g, st, f),
		newCompareCommand(g, st, f),
		newKubectlDashboardCommand(f, st),
		newVersionCommand(st),
	)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
