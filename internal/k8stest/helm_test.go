package k8stest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cnperf/cnperf/internal/cli"
	"github.com/cnperf/cnperf/internal/k8s"
)

// helmNamespace is where the real-cluster test installs the chart: a
// namespace of its own, so that the release and the harness's `cnperf k8s
// deploy` (namespace cnperf) share no namespaced object. The chart's
// cluster-wide objects (ClusterRole cnperf-cluster-reader) have the same
// names as the deploy's, so the release is uninstalled before the deploy.
const helmNamespace = "cnperf-helm"

// helmRelease is the release's name.
const helmRelease = "cnperf"

// helmBinary finds helm: $CNPERF_HELM (make test sets it), else what
// test/helm/build.sh prints (it builds helm from its Go module into
// /var/cache/cnperf-tools on first use and then only prints the path).
func helmBinary(ctx context.Context, root string) (string, error) {
	if p := os.Getenv("CNPERF_HELM"); p != "" {
		return p, nil
	}
	bctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	var errb bytes.Buffer
	cmd := exec.CommandContext(bctx, "nice", "-n", "10", filepath.Join(root, "test", "helm", "build.sh"))
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("test/helm/build.sh: %w\n%s", err, errb.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// helmChart installs deploy/helm/cnperf with the real helm into
// helmNamespace (the harness's image, pull policy Never, agents
// authenticated by their ServiceAccount tokens as the chart makes them),
// checks the release through the kubectl plugin run by the real kubectl
// (--kubeconfig, --context and -n each shown to matter), runs a baseline
// on the chart's agents through `kubectl cnperf run`, and uninstalls:
// nothing of the release is left when it returns, even when a check
// fails.
func helmChart(ctx context.Context, t *testing.T, cl *Cluster, kc *k8s.Client, root, cnperf, cniDir string) {
	t0 := time.Now()
	helm, err := helmBinary(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("helm %s (found or built in %v)", helm, time.Since(t0).Round(time.Second))
	helmHome := t.TempDir()
	runHelm := func(timeout time.Duration, args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(cctx, helm, append(args, "--kubeconfig", cl.Kubeconfig, "--namespace", helmNamespace)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG=", "HELM_CACHE_HOME="+helmHome+"/cache",
			"HELM_CONFIG_HOME="+helmHome+"/config", "HELM_DATA_HOME="+helmHome+"/data")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	// The chart's PersistentVolumeClaim gets a volume of its own, bound to
	// it in advance, so that the harness's volume stays for the deploy.
	pvName := "kcn-cnperf-helm-data"
	claimVolume(ctx, t, cl, kc, pvName, "pv-helm", helmNamespace)
	uninstalled := false
	t.Cleanup(func() {
		if !uninstalled {
			out, err := runHelm(3*time.Minute, "uninstall", helmRelease, "--wait", "--timeout", "2m")
			t.Logf("helm uninstall (clean-up after a failed check): %v\n%s", err, out)
		}
		if err := deleteNamespace(ctx, kc, helmNamespace, 3*time.Minute); err != nil {
			t.Errorf("namespace %s: %v", helmNamespace, err)
		}
		if err := kc.Kube.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("persistent volume %s: %v", pvName, err)
		}
	})

	// Install, as a user would, waiting until the server and the agents
	// are ready.
	repo, tag, _ := strings.Cut(CnperfImage, ":")
	t0 = time.Now()
	out, err := runHelm(6*time.Minute, "install", helmRelease, filepath.Join(root, "deploy", "helm", "cnperf"),
		"--create-namespace", "--wait", "--timeout", "5m",
		"--set", "image.repository="+repo, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
		// The node-node row below comes from the host-network agents.
		"--set", "hostAgents=true")
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	t.Logf("helm install --wait (server and agents ready) in %v:\n%s", time.Since(t0).Round(time.Second), out)
	next := "kubectl cnperf status -n " + helmNamespace
	if !strings.Contains(out, next) {
		t.Errorf("NOTES.txt does not tell the next command %q", next)
	}

	// kubectl's own binary runs the plugin: a kubectl-cnperf link on PATH,
	// for these commands only.
	plugin := kubectlPlugin(t, cl, cnperf)
	cfg := twoContexts(t, cl)

	// -n: the release's namespace is found, ready, with the chart's six
	// agents; without -n the plugin looks in namespace cnperf, which has
	// nothing yet.
	var st struct {
		Deployed, Ready bool
		Agents          []k8s.Agent
	}
	// helm's --wait counts a DaemonSet done with one pod short (its
	// default maxUnavailable is 1), so the status is polled until every
	// agent is ready, for at most two minutes.
	var errOut string
	t1 := time.Now()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Second) {
		out, errOut, err = plugin(time.Minute, "status", "--kubeconfig", cfg, "--context", "admin", "-n", helmNamespace, "--json")
		if err != nil || json.Unmarshal([]byte(out), &st) != nil {
			t.Fatalf("kubectl cnperf status -n %s: %v\n%s\n%s", helmNamespace, err, out, errOut)
		}
		if st.Ready || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("kubectl cnperf status -n %s: ready %v %v after helm install returned", helmNamespace, st.Ready, time.Since(t1).Round(time.Second))
	if !st.Deployed || !st.Ready || len(st.Agents) != 3*len(cl.Nodes) {
		t.Errorf("kubectl cnperf status -n %s: deployed %v ready %v, %d agents, want %d:\n%s", helmNamespace, st.Deployed, st.Ready, len(st.Agents), 3*len(cl.Nodes), out)
	}
	hc, err := k8s.New(ctx, k8s.Config{Kubeconfig: cl.Kubeconfig, Namespace: helmNamespace})
	if err != nil {
		t.Fatal(err)
	}
	chartPods := map[string]bool{}
	if agents, err := hc.Agents(ctx); err != nil {
		t.Fatal(err)
	} else {
		for _, a := range agents {
			chartPods[a.Name] = true
		}
	}
	for _, a := range st.Agents {
		if !chartPods[a.Name] {
			t.Errorf("kubectl cnperf status -n %s lists %s, not an agent pod of the release", helmNamespace, a.Name)
		}
	}
	out, errOut, err = plugin(time.Minute, "status", "--kubeconfig", cfg, "--context", "admin")
	if want := "cnperf is not deployed in namespace " + k8s.Namespace; err != nil || !strings.Contains(out, want) {
		t.Errorf("kubectl cnperf status without -n: err %v, want %q (the namespace is there, empty):\n%s\n%s", err, want, out, errOut)
	}
	t.Logf("kubectl cnperf status without -n: %s", strings.TrimSpace(out))
	// --context: the kubeconfig's current context has a token the API
	// server refuses.
	_, errOut, err = plugin(time.Minute, "status", "--kubeconfig", cfg, "-n", helmNamespace)
	if err == nil || !strings.Contains(errOut, "refused the kubeconfig's credentials") {
		t.Errorf("kubectl cnperf status in the current context (a refused token): err %v, stderr %q", err, errOut)
	}
	t.Logf("kubectl cnperf status without --context: %s", strings.TrimSpace(errOut))
	out, _, err = plugin(time.Minute, next, "--kubeconfig", cfg, "--context", "admin")
	if err != nil {
		t.Errorf("%s: %v", next, err)
	}
	t.Logf("%s --kubeconfig %s --context admin:\n%s", next, filepath.Base(cfg), out)

	// The baseline on the chart's agents, through the plugin.
	t0 = time.Now()
	out, errOut, err = plugin(10*time.Minute, "run", "baseline", "--kubeconfig", cfg, "--context", "admin", "-n", helmNamespace,
		"--time", "2s", "--repeat", "1", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("kubectl cnperf run baseline -n %s: %v\n%s\n%s", helmNamespace, err, out, errOut)
	}
	var res struct {
		RunID string `json:"run_id"`
		Rows  []row  `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	t.Logf("kubectl cnperf run baseline -n %s on the chart's agents in %v: run %s", helmNamespace, time.Since(t0).Round(time.Second), res.RunID)
	got := map[string]bool{}
	for _, r := range res.Rows {
		got[r.Connection] = true
		t.Logf("%-20s tcp %8.0f Mbit/s  udp loss %5.2f %%  rtt avg %.3f ms  (%s -> %s)", r.Connection,
			r.Median["throughput_bps.receiver"]/1e6, r.Median["loss_pct"], r.Median["rtt_ms.avg"], r.Src, r.Dst)
		for _, k := range []string{"throughput_bps.receiver", "rtt_ms.avg", "udp.throughput_bps.receiver"} {
			if !(r.Median[k] > 0) {
				t.Errorf("%s: %s = %v, want positive", r.Connection, k, r.Median[k])
			}
		}
		for _, end := range []string{r.Src, r.Dst} {
			pod, _, ok := strings.Cut(end[strings.LastIndex(end, " ")+1:], "@")
			if ok && !chartPods[pod] {
				t.Errorf("%s: %s is not an agent pod of the release", r.Connection, end)
			}
		}
	}
	for _, conn := range []string{"pod-pod same node", "pod-pod cross node", "node-node", "pod-service"} {
		if !got[conn] {
			t.Errorf("no %q row", conn)
		}
	}

	// Uninstall: every object of the release goes but the token Secret,
	// which the chart keeps (helm.sh/resource-policy: keep), as it says.
	t0 = time.Now()
	out, err = runHelm(3*time.Minute, "uninstall", helmRelease, "--wait", "--timeout", "2m")
	if err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	uninstalled = true
	t.Logf("helm uninstall --wait in %v: %s", time.Since(t0).Round(time.Second), strings.TrimSpace(out))
	if _, err := kc.Kube.RbacV1().ClusterRoles().Get(ctx, "cnperf-cluster-reader", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole cnperf-cluster-reader after uninstall: %v", err)
	}
	if _, err := kc.Kube.RbacV1().ClusterRoleBindings().Get(ctx, k8s.TokenReviewBinding+"-"+helmNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRoleBinding %s-%s after uninstall: %v", k8s.TokenReviewBinding, helmNamespace, err)
	}
	if _, err := kc.Kube.CoreV1().Secrets(helmNamespace).Get(ctx, k8s.TokensSecret, metav1.GetOptions{}); err != nil {
		t.Errorf("Secret %s after uninstall (the chart keeps it): %v", k8s.TokensSecret, err)
	}
	t0 = time.Now()
	if err := deleteNamespace(ctx, kc, helmNamespace, 3*time.Minute); err != nil {
		t.Fatalf("namespace %s: %v", helmNamespace, err)
	}
	t.Logf("namespace %s (the kept Secret, the agents' pods) gone in %v", helmNamespace, time.Since(t0).Round(time.Second))
}

// kubectlPlugin returns a function that runs `kubectl cnperf ARGS` with
// the harness's kubectl, finding cnperf as kubectl-cnperf in a directory
// put first on PATH for that command only, without $KUBECONFIG or a
// ~/.kube/config: the plugin reaches the cluster only through its flags.
func kubectlPlugin(t *testing.T, cl *Cluster, cnperf string) func(time.Duration, ...string) (string, string, error) {
	dir := t.TempDir()
	if err := os.Symlink(cnperf, filepath.Join(dir, cli.KubectlPluginName)); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG=", "HOME="+dir, "CNPERF_TOKEN=", "CNPERF_USER_TOKEN=")
	return func(timeout time.Duration, args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		// `kubectl cnperf status -n NS` as one string (NOTES.txt's line)
		// or as separate arguments.
		if len(args) > 0 && strings.HasPrefix(args[0], "kubectl cnperf ") {
			args = append(strings.Fields(strings.TrimPrefix(args[0], "kubectl cnperf ")), args[1:]...)
		}
		cmd := exec.CommandContext(ctx, filepath.Join(cl.BinDir, "kubectl"), append([]string{"cnperf"}, args...)...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
}

// twoContexts writes a kubeconfig whose current context's token the API
// server refuses, and whose context "admin" is the harness's admin: only
// --context admin reaches the cluster.
func twoContexts(t *testing.T, cl *Cluster) string {
	cfg, err := clientcmd.LoadFromFile(cl.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	if cur == nil {
		t.Fatalf("%s: no current context", cl.Kubeconfig)
	}
	admin := *cur
	cfg.Contexts["admin"] = &admin
	cfg.AuthInfos["refused"] = &clientcmdapi.AuthInfo{Token: "not-a-token-of-this-cluster"}
	cfg.Contexts["refused"] = &clientcmdapi.Context{Cluster: cur.Cluster, AuthInfo: "refused"}
	cfg.CurrentContext = "refused"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// deleteNamespace deletes ns and waits until it is gone (its pods
// terminated, its objects removed), at most timeout.
func deleteNamespace(ctx context.Context, kc *k8s.Client, ns string, timeout time.Duration) error {
	err := kc.Kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		_, err := kc.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still there after %v (last error %v)", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
