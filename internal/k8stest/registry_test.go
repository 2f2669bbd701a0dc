package k8stest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/k8s"
)

// registryNamespace is where the registry check installs cnperf: a fresh
// namespace of its own, so nothing of the harness's deploy (namespace
// cnperf, its image imported with ctr) is in it.
const registryNamespace = "cnperf-registry"

// registryPullSecret is the image pull Secret the deploy writes there.
const registryPullSecret = "kcn-registry-pull"

// pushedRef is what `cnperf k8s deploy --push` prints on stderr once the
// push is done: the reference by digest it deploys.
var pushedRef = regexp.MustCompile(`pushed (\S+@(sha256:[0-9a-f]{64}))`)

// registryRestrictedInstall is the path a user of a managed cluster takes:
// a registry on the harness's network that refuses anonymous requests;
// `cnperf k8s deploy --push` with the credentials of a Docker config,
// writing an image pull Secret, into a fresh namespace that the default
// install labels Pod Security restricted (the API server enforces it);
// the kubelets pull the image by digest through containerd with the
// Secret's credentials; `cnperf run baseline --k8s` gives pod rows there;
// a QoS suite is refused naming --qos-agents; a re-deploy with
// --host-agents --qos-agents runs qos-priority. Namespace, volume and
// registry are removed when it returns, even when a check fails.
func registryRestrictedInstall(ctx context.Context, t *testing.T, cl *Cluster, cnperf, cniDir string) {
	ns := registryNamespace
	kc, err := k8s.New(ctx, k8s.Config{Kubeconfig: cl.Kubeconfig, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := cl.StartRegistry(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Errorf("registry: %v", err)
		}
	})
	t.Logf("%s", reg)
	dockerConfig := t.TempDir()
	if err := reg.WriteDockerConfig(dockerConfig); err != nil {
		t.Fatal(err)
	}
	// cnperf as the user runs it: their kubeconfig, their Docker config
	// (the registry's credentials, as `docker login` writes them).
	cnp := func(timeout time.Duration, args ...string) (string, string, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(cctx, cnperf, append(args, "-n", ns)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cl.Kubeconfig, "DOCKER_CONFIG="+dockerConfig, "CNPERF_TOKEN=", "CNPERF_USER_TOKEN=")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}

	// The server's claim gets a volume of its own, bound to it in advance
	// (the harness's volume stays for the deploy into namespace cnperf).
	pvName := "kcn-cnperf-registry-data"
	claimVolume(ctx, t, cl, kc, pvName, "pv-registry", ns)
	undeployed := false
	t.Cleanup(func() {
		if !undeployed {
			out, errOut, err := cnp(4*time.Minute, "k8s", "undeploy", "--wait", "3m")
			t.Logf("cnperf k8s undeploy -n %s (clean-up after a failed check): %v\n%s%s", ns, err, out, errOut)
		}
		if err := deleteNamespace(ctx, kc, ns, 3*time.Minute); err != nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
		if err := kc.Kube.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("persistent volume %s: %v", pvName, err)
		}
	})

	// Anonymous requests are refused: only credentials pull.
	for _, path := range []string{"/v2/", "/v2/cnperf/tags/list"} {
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + reg.Host + path)
		if err != nil {
			t.Fatalf("anonymous GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("anonymous GET %s: HTTP %d, want 401", path, resp.StatusCode)
		}
	}

	// 1. The default install, pushed and deployed by digest, with the pull
	// Secret written from the Docker config.
	deployArgs := []string{"k8s", "deploy", "--push", reg.Host + "/cnperf", "--insecure-registry",
		"--image-pull-secret", registryPullSecret, "--create-image-pull-secret", "--wait", "5m"}
	t0 := time.Now()
	out, errOut, err := cnp(7*time.Minute, deployArgs...)
	if err != nil {
		t.Fatalf("cnperf k8s deploy --push: %v\n%s\n%s", err, out, errOut)
	}
	t.Logf("cnperf k8s deploy -n %s --push %s/cnperf (pushed, pulled, ready) in %v:\n%s%s", ns, reg.Host, time.Since(t0).Round(time.Second), errOut, out)
	m := pushedRef.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("deploy --push did not say what it pushed:\n%s", errOut)
	}
	ref, digest := m[1], m[2]
	if !strings.HasPrefix(ref, reg.Host+"/cnperf@") {
		t.Fatalf("pushed %s, not to %s/cnperf", ref, reg.Host)
	}

	// The namespace enforces restricted, and the API server does enforce
	// it: a privileged pod is refused there.
	nsObj, err := kc.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nsObj.Labels["pod-security.kubernetes.io/enforce"]; got != k8s.LevelRestricted {
		t.Errorf("namespace %s: pod-security.kubernetes.io/enforce %q, want %q", ns, got, k8s.LevelRestricted)
	}
	privileged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kcn-privileged", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: ref,
			SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)}}}}}
	_, err = kc.Kube.CoreV1().Pods(ns).Create(ctx, privileged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
		t.Errorf("a privileged pod in namespace %s: %v, want it refused by Pod Security restricted", ns, err)
	} else {
		t.Logf("the API server enforces restricted in %s: %v", ns, err)
	}

	// Every pod runs the pushed image by digest, pulled with the Secret.
	checkPulled(ctx, t, cl, kc, reg, ref, digest)

	// 2. The baseline's pod rows on the restricted install.
	t0 = time.Now()
	out, errOut, err = cnp(10*time.Minute, "run", "baseline", "--k8s", "--time", "2s", "--repeat", "1", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run baseline --k8s -n %s: %v\n%s\n%s", ns, err, out, errOut)
	}
	var base struct {
		RunID string `json:"run_id"`
		Rows  []row  `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &base); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	t.Logf("cnperf run baseline --k8s -n %s (restricted, image pulled by digest) in %v: run %s", ns, time.Since(t0).Round(time.Second), base.RunID)
	agents, err := kc.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, a := range agents {
		ours[a.Name] = true
	}
	got := map[string]bool{}
	for _, r := range base.Rows {
		got[r.Connection] = true
		t.Logf("%-20s tcp %8.0f Mbit/s  udp loss %5.2f %%  rtt avg %.3f ms  (%s -> %s)", r.Connection,
			r.Median["throughput_bps.receiver"]/1e6, r.Median["loss_pct"], r.Median["rtt_ms.avg"], r.Src, r.Dst)
		for _, end := range []string{r.Src, r.Dst} {
			pod, _, ok := strings.Cut(end[strings.LastIndex(end, " ")+1:], "@")
			if ok && !ours[pod] {
				t.Errorf("%s: %s is not an agent pod of namespace %s", r.Connection, end, ns)
			}
		}
		if r.Connection != "pod-pod same node" && r.Connection != "pod-pod cross node" {
			continue
		}
		for _, k := range []string{"throughput_bps.receiver", "throughput_bps.sender", "rtt_ms.avg", "udp.throughput_bps.receiver"} {
			if !(r.Median[k] > 0) {
				t.Errorf("%s: %s = %v, want positive", r.Connection, k, r.Median[k])
			}
		}
	}
	for _, conn := range []string{"pod-pod same node", "pod-pod cross node"} {
		if !got[conn] {
			t.Errorf("no %q row on the restricted install", conn)
		}
	}

	// 3. A QoS suite is refused there, naming the opt-in, before it starts.
	_, errOut, err = cnp(3*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1", "--set", "variants=pod-htb", "--cni-conf-dir", cniDir)
	if err == nil || !strings.Contains(errOut, "--qos-agents") {
		t.Errorf("qos-priority pod-htb on the restricted install: err %v, want a refusal naming --qos-agents:\n%s", err, errOut)
	} else {
		t.Logf("qos-priority on the restricted install refused: %s", strings.TrimSpace(errOut))
	}

	// 4. The opt-in agent sets, from the same registry, and qos-priority.
	t0 = time.Now()
	out, errOut, err = cnp(7*time.Minute, append(deployArgs, "--host-agents", "--qos-agents")...)
	if err != nil {
		t.Fatalf("cnperf k8s deploy --push --host-agents --qos-agents: %v\n%s\n%s", err, out, errOut)
	}
	t.Logf("cnperf k8s deploy -n %s --push ... --host-agents --qos-agents (ready) in %v", ns, time.Since(t0).Round(time.Second))
	if m := pushedRef.FindStringSubmatch(errOut); m == nil || m[1] != ref {
		t.Errorf("the second push: %q, want the same image %s (the image is built reproducibly)", m, ref)
	}
	nsObj, err = kc.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nsObj.Labels["pod-security.kubernetes.io/enforce"]; got != k8s.LevelPrivileged {
		t.Errorf("namespace %s with the opt-ins: enforce %q, want %q", ns, got, k8s.LevelPrivileged)
	}
	t0 = time.Now()
	out, errOut, err = cnp(10*time.Minute, "run", "qos-priority", "--k8s", "--time", "2s", "--repeat", "1",
		"--set", "variants=pod-htb", "--set", "markings=none,EF", "--cni-conf-dir", cniDir, "--json")
	if err != nil {
		t.Fatalf("cnperf run qos-priority --k8s -n %s: %v\n%s\n%s", ns, err, out, errOut)
	}
	var qos struct {
		Rows []row `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &qos); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	t.Logf("cnperf run qos-priority --k8s -n %s (opt-in agent sets) in %v", ns, time.Since(t0).Round(time.Second))
	qosRows := map[string]bool{}
	for _, r := range qos.Rows {
		t.Logf("%-18s %-8s %-4s p99 %7.3f ms (unmarked beside it %7.3f ms)  verdict: %s", r.Connection, r.Labels["variant"], r.Labels["marking"],
			r.Median["latency_ms.p99"], r.Median["reference_latency_ms.p99"], r.Labels["verdict"])
		if r.Labels["variant"] != "pod-htb" || r.Labels["marking"] != "EF" {
			continue
		}
		qosRows[r.Connection] = true
		if !(r.Median["latency_ms.p99"] > 0) || r.Labels["verdict"] == "" {
			t.Errorf("qos-priority %s pod-htb: p99 %v, verdict %q: want a measured row with its verdict", r.Connection, r.Median["latency_ms.p99"], r.Labels["verdict"])
		}
	}
	for _, conn := range []string{"pod-pod same node", "pod-pod cross node"} {
		if !qosRows[conn] {
			t.Errorf("qos-priority: no pod-htb EF row %q", conn)
		}
	}

	// Undeployed: the namespace and the review binding are gone.
	t0 = time.Now()
	out, errOut, err = cnp(4*time.Minute, "k8s", "undeploy", "--wait", "3m")
	if err != nil {
		t.Fatalf("cnperf k8s undeploy -n %s: %v\n%s\n%s", ns, err, out, errOut)
	}
	undeployed = true
	if _, err := kc.Kube.RbacV1().ClusterRoleBindings().Get(ctx, k8s.TokenReviewBinding+"-"+ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRoleBinding %s-%s after undeploy: %v", k8s.TokenReviewBinding, ns, err)
	}
	t.Logf("cnperf k8s undeploy -n %s in %v", ns, time.Since(t0).Round(time.Second))
}

// checkPulled: every pod of the namespace runs ref (by digest) with the
// pull Secret, the kubelet of every node pulled it (its "Successfully
// pulled" event; the image was in no node's containerd before), each
// node's containerd fetched the index by digest from the registry with
// the credentials, and holds the image under that name.
func checkPulled(ctx context.Context, t *testing.T, cl *Cluster, kc *k8s.Client, reg *Registry, ref, digest string) {
	t.Helper()
	pods, err := kc.Kube.CoreV1().Pods(kc.NS()).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeOf := map[string]string{}
	for _, p := range pods.Items {
		nodeOf[p.Name] = p.Spec.NodeName
		if !slices.ContainsFunc(p.Spec.ImagePullSecrets, func(s corev1.LocalObjectReference) bool { return s.Name == registryPullSecret }) {
			t.Errorf("pod %s: image pull secrets %v, want %s", p.Name, p.Spec.ImagePullSecrets, registryPullSecret)
		}
		for _, c := range p.Spec.Containers {
			if c.Image != ref {
				t.Errorf("pod %s container %s: image %q, want the pushed %q (by digest)", p.Name, c.Name, c.Image, ref)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !strings.HasSuffix(cs.ImageID, "@"+digest) {
				t.Errorf("pod %s container %s: image id %q, want the pushed index %s", p.Name, cs.Name, cs.ImageID, digest)
			}
		}
	}
	if len(pods.Items) == 0 {
		t.Fatal("no pods")
	}
	evs, err := kc.Kube.CoreV1().Events(kc.NS()).List(ctx, metav1.ListOptions{FieldSelector: "reason=Pulled"})
	if err != nil {
		t.Fatal(err)
	}
	pulledOn := map[string]string{}
	for _, e := range evs.Items {
		if strings.HasPrefix(e.Message, `Successfully pulled image "`+ref+`"`) && nodeOf[e.InvolvedObject.Name] != "" {
			pulledOn[nodeOf[e.InvolvedObject.Name]] = e.Message
		}
	}
	fetched := fetchedBy(reg.Fetches(), "/manifests/"+digest)
	refused := map[string]int{}
	for _, q := range reg.Refused() {
		refused[q.From]++
	}
	for _, n := range cl.Nodes {
		if msg, ok := pulledOn[n.Name]; !ok {
			t.Errorf("node %s: no %q event of the kubelet pulling %s", n.Name, "Successfully pulled image", ref)
		} else {
			t.Logf("node %s: %s", n.Name, msg)
		}
		if !fetched[n.IP] {
			t.Errorf("node %s (%s): its containerd never fetched /v2/cnperf/manifests/%s with the credentials (fetches from %v)", n.Name, n.IP, digest, keys(fetched))
		}
		b, err := exec.CommandContext(ctx, "ctr", "--address", n.Socket, "-n", "k8s.io", "images", "ls", "-q").Output()
		if err != nil {
			t.Errorf("node %s: ctr images ls: %v", n.Name, err)
		} else if !slices.Contains(strings.Fields(string(b)), ref) {
			t.Errorf("node %s: containerd has no image %s:\n%s", n.Name, ref, b)
		}
	}
	t.Logf("%d pods run %s with secret %s; the registry served the index to %v with the credentials and refused %v anonymous requests (by address)",
		len(pods.Items), ref, registryPullSecret, keys(fetched), refused)
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fetchedBy returns the client addresses that fetched a path ending in
// suffix with the credentials.
func fetchedBy(reqs []RegistryRequest, suffix string) map[string]bool {
	out := map[string]bool{}
	for _, q := range reqs {
		if strings.HasSuffix(q.Path, suffix) {
			out[q.From] = true
		}
	}
	return out
}
