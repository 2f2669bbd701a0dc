package k8stest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/k8s"
)

// EnvHarness turns the real-cluster test on.
const EnvHarness = "CNPERF_K8S_HARNESS"

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// TestRealCluster builds Kubernetes (cached), starts a two-node cluster,
// deploys cnperf with `cnperf k8s deploy`, runs the baseline and the
// shaping suite on it, replays the seed's v1 workflow against the
// in-cluster server, checks bad input against the real API server, runs
// two server replicas on PostgreSQL and kills one (Flannel), and
// undeploys; the cluster is torn down and the sysctls restored even when
// a check fails.
func TestRealCluster(t *testing.T) {
	if os.Getenv(EnvHarness) != "1" {
		t.Skipf("the real-cluster harness is opt-in: set %s=1 (it builds Kubernetes v1.34 from Go modules on first use, about 8 minutes on 2 idle cores, then starts a two-node cluster)", EnvHarness)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, cgroups and containerd (CI runs as root)")
	}
	if err := Preflight(); err != nil {
		t.Skipf("cannot run a cluster here: %v", err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	root := repoRoot(t)
	cache := os.Getenv("CNPERF_K8S_CACHE")
	if cache == "" {
		cache = "/var/cache/cnperf-k8s"
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	imgs, cnperf, err := BuildImages(ctx, root, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Leftovers of a crashed run hold kubelet's sysctls: clean them first,
	// so the values compared after teardown are the machine's own.
	if err := Cleanup(cache, log); err != nil {
		t.Fatalf("leftovers of an earlier run: %v", err)
	}
	sysBefore := SysctlsNow()
	var cl *Cluster
	t.Cleanup(func() {
		if t.Failed() && cl != nil {
			t.Logf("component logs:%s", cl.Logs(1500))
		}
		if err := cl.Down(); err != nil {
			t.Errorf("tear down: %v", err)
		}
		if after := SysctlsNow(); fmt.Sprint(after) != fmt.Sprint(sysBefore) {
			t.Errorf("sysctls not restored: before %v after %v", sysBefore, after)
		}
		if ns := harnessNetns(); len(ns) > 0 {
			t.Errorf("namespaces left: %v", ns)
		}
		if cg := cgroupRoots(); len(cg) > 0 {
			t.Errorf("cgroups left: %v", cg)
		}
		t.Logf("harness total (build check, cluster, checks, teardown): %v", time.Since(start).Round(time.Second))
	})
	upStart := time.Now()
	cni, err := harnessCNI()
	if err != nil {
		t.Fatal(err)
	}
	backends := cni.Backends()
	cl, err = Up(ctx, Options{CacheDir: cache, BuildScript: filepath.Join(root, "test", "k8s", "build.sh"), Images: imgs, CNI: cni, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up (binaries cached or built, two nodes Ready) in %v", time.Since(upStart).Round(time.Second))
	kc, err := k8s.New(ctx, k8s.Config{Kubeconfig: cl.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	cnp := func(timeout time.Duration, args ...string) (string, string, error) {
		cctx, ccancel := context.WithTimeout(ctx, timeout)
		defer ccancel()
		cmd := exec.CommandContext(cctx, cnperf, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+cl.Kubeconfig, "CNPERF_TOKEN=", "CNPERF_USER_TOKEN=")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	cniDir := filepath.Join(cl.RunDir, "kcn-node1", "cni") // every node's directory has the same layout

	// The PVC of the server binds to a hostPath volume (the harness has no
	// storage provisioner).
	pvDir := filepath.Join(cl.RunDir, "pv")
	if err := os.MkdirAll(pvDir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(pvDir, 0o777)
	_, err = kc.Kube.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "kcn-cnperf-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: pvDir}},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The kustomize base and overlays, as kubectl users apply them, pass a
	// server-side dry run against the real API server (into the empty
	// namespace, so every object is checked as a new one).
	if _, err := kc.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: k8s.Namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"base", "overlays/nodeport", "overlays/postgres", "overlays/plain-http", "overlays/mysql", "overlays/privileged"} {
		kctl := filepath.Join(cl.BinDir, "kubectl")
		render := exec.CommandContext(ctx, kctl, "kustomize", filepath.Join(root, "deploy", "kubernetes", dir))
		manifest, err := render.Output()
		if err != nil {
			t.Errorf("kubectl kustomize %s: %v", dir, err)
			continue
		}
		apply := exec.CommandContext(ctx, kctl, "--kubeconfig", cl.Kubeconfig, "apply", "--dry-run=server", "-f", "-")
		apply.Stdin = bytes.NewReader(manifest)
		if b, err := apply.CombinedOutput(); err != nil {
			t.Errorf("kubectl apply --dry-run=server -k %s: %v\n%s", dir, err, b)
		} else {
			t.Logf("kubectl apply --dry-run=server -k %s: %d objects accepted", dir, strings.Count(string(b), "(server dry run)"))
		}
	}

	// The Helm chart installed with the real helm in a namespace of its
	// own, `kubectl cnperf` through the real kubectl, a baseline on the
	// chart's agents, and uninstalled before the deploy below (one CNI
	// only, to keep the harness short).
	if cl.CNI.Facts().Name == "flannel" {
		t.Run("helm chart and kubectl plugin", func(t *testing.T) { helmChart(ctx, t, cl, kc, root, cnperf, cniDir) })
	}
	t.Run("registry restricted install", func(t *testing.T) { registryRestrictedInstall(ctx, t, cl, cnperf, cniDir) })

	// 1. The manifests applied; server and agents Running on both nodes.
	t0 := time.Now()
	out, errOut, err := cnp(6*time.Minute, "k8s", "deploy", "--image", CnperfImage, "--image-pull-policy", "Never", "--host-agents", "--qos-agents", "--wait", "5m")
	if err != nil {
		t.Fatalf("cnperf k8s deploy: %v\n%s\n%s", err, out, errOut)
	}
	t.Logf("cnperf k8s deploy (ready) in %v:\n%s", time.Since(t0).Round(time.Second), out)
	agents, err := kc.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]map[string]bool{}
	for _, a := range agents {
		if perNode[a.Node] == nil {
			perNode[a.Node] = map[string]bool{}
		}
		perNode[a.Node][a.Component] = a.Ready
	}
	for _, n := range cl.Nodes {
		for _, comp := range []string{"pod", "pod-b", "host"} {
			if !perNode[n.Name][comp] {
				t.Errorf("node %s: no ready %s agent (agents: %+v)", n.Name, comp, agents)
			}
		}
	}
	rec := clusterRecord{}
	baselines := map[string]string{} // backend -> baseline run id
	var bundles []string             // evaluate's bundle per backend
	for i, backend := range backends {
		if i > 0 {
			t0 := time.Now()
			if err := cl.CNI.SwitchBackend(ctx, cl, backend); err != nil {
				t.Fatalf("%s backend %s: %v", cl.CNI.Facts().Name, backend, err)
			}
			t.Logf("%s switched to backend %s in %v", cl.CNI.Facts().Name, backend, time.Since(t0).Round(time.Millisecond))
			t0 = time.Now()
			recreatePods(ctx, t, kc)
			t.Logf("cnperf's pods recreated on the %s network and ready in %v", backend, time.Since(t0).Round(time.Second))
		}
		want := cl.CNI.Facts()
		t.Run(want.String(), func(t *testing.T) {
			t0 := time.Now()
			checkFacts(t, cnp, cniDir, want)
			if i == 0 {
				// The seed's v1 workflow against the server in the cluster.
				t.Run("seed v1 workflow", func(t *testing.T) { seedWorkflow(ctx, t, kc, agents) })
				// Agents authenticate by ServiceAccount token (TokenReview).
				t.Run("agent identity", func(t *testing.T) { agentIdentity(ctx, t, kc, agents) })
				// The server answers HTTPS only; agents and the CLI verify it.
				t.Run("tls", func(t *testing.T) { serverTLS(ctx, t, kc, cnp, agents) })
				t.Run("agent zones", func(t *testing.T) { agentZones(ctx, t, cl, kc) })
			}
			t.Run("baseline", func(t *testing.T) {
				baselines[backend] = runBaseline(ctx, t, kc, cnp, cniDir, want, &rec)
			})
			t.Run("wire dscp", func(t *testing.T) { runWireDSCP(t, cnp, cniDir, want) })
			t.Run("shaping 10M annotation", func(t *testing.T) { runShaping(ctx, t, kc, cnp, cniDir, want, &rec) })
			if want.Name == "calico" && i == 0 {
				// Calico's own annotation and its default bucket, as made.
				t.Run("shaping calico annotations as made", func(t *testing.T) { runShapingCalicoAsMade(ctx, t, kc, cnp, cniDir, want, &rec) })
			}
			t.Run("qos-priority", func(t *testing.T) { runQoSPriority(t, cl, cnp, cniDir, want, &rec, i == 0) })
			t.Run("contention", func(t *testing.T) { runContention(t, cnp, cniDir, want, &rec) })
			t.Run("netpol", func(t *testing.T) { runNetpol(ctx, t, kc, cnp, cniDir, want, &rec) })
			t.Run("vxlan inherit", func(t *testing.T) { runVXLANInherit(t, cl, cnp, cniDir, want) })
			t.Run("evaluate", func(t *testing.T) { bundles = append(bundles, runEvaluate(ctx, t, kc, cnp, cniDir, want)) })
			t.Run("cni qos", func(t *testing.T) { runCNIQoS(ctx, t, kc, cnp, cniDir, want, &rec) })
			t.Run("cni qos remedy", func(t *testing.T) { runCNIQoSRemedy(t, cl, cnp, cniDir, want) })
			if i == 0 {
				// On the first backend only, to keep the harness short.
				t.Run("policing 1M ingress 100M offered", func(t *testing.T) { runPolicing(ctx, t, kc, cnp, cniDir, want, &rec) })
				t.Run("capacity cross node", func(t *testing.T) { runCapacity(t, cnp, cniDir, want, &rec) })
			}
			t.Logf("%s: facts, baseline and shaping in %v", want, time.Since(t0).Round(time.Second))
		})
	}
	if len(backends) > 1 && baselines[backends[0]] != "" && baselines[backends[1]] != "" {
		t.Logf("baseline %s (reference) against %s, from the stored runs:\n%s", backends[0], backends[1],
			compareRuns(ctx, t, kc, cnp, baselines[backends[0]], baselines[backends[1]]))
		name := cl.CNI.Facts().Name
		tbl, err := seed002Table(name, [2]string{backends[0], backends[1]},
			fromServer(ctx, t, kc, cnp, "compare", baselines[backends[0]], baselines[backends[1]], "--format", "json"))
		if err != nil {
			t.Errorf("seed 002's table: %v", err)
		} else {
			t.Logf("seed 002's table on %s (cnperf compare of the stored baselines; 2 s runs on a shared 2-core machine, the seed 10 s on bare metal):\n%s", name, tbl)
		}
	}
	if len(bundles) > 1 {
		compareBundles(t, cnp, bundles)
	}
	if path := os.Getenv(EnvReport); path != "" {
		if err := rec.write(path); err != nil {
			t.Errorf("%s: %v", EnvReport, err)
		} else {
			t.Logf("record of the real-cluster test written to %s (%d suites)", path, len(rec.Suites))
		}
	}

	// Bad input against the real API server.
	t.Run("bad input", func(t *testing.T) {
		// A service account with no RBAC binding.
		if _, err := kc.Kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kcn-nobody"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := kc.Kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, "kcn-nobody", &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nobody, err := cl.UserKubeconfig("nobody", tr.Status.Token)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		_, errOut, err := cnp(time.Minute, "k8s", "status", "--kubeconfig", nobody)
		if err == nil || !strings.Contains(errOut, "lacks RBAC permission") {
			t.Errorf("status without RBAC: err %v, stderr %q", err, errOut)
		}
		t.Logf("missing RBAC: %v: %s", time.Since(t0).Round(time.Millisecond), strings.TrimSpace(errOut))
		t0 = time.Now()
		_, err = kc.RunPod(ctx, k8s.TestPod{Name: "kcn-nowhere", Node: "kcn-node9",
			Container: corev1.Container{Image: CnperfImage, ImagePullPolicy: corev1.PullNever, Args: []string{"respond"}}}, time.Minute)
		if err == nil || !strings.Contains(err.Error(), `node "kcn-node9" does not exist (nodes: kcn-node1, kcn-node2)`) {
			t.Errorf("pod on a missing node: %v", err)
		}
		t.Logf("node that does not exist: %v: %v", time.Since(t0).Round(time.Millisecond), err)
	})

	// Two server replicas on a PostgreSQL in the cluster (overlays/postgres),
	// one SIGKILLed under a run (Flannel only, to keep the harness short).
	if cl.CNI.Facts().Name == "flannel" {
		t.Run("server replicas on postgres, one killed", func(t *testing.T) {
			if !slices.ContainsFunc(imgs, func(f string) bool { return strings.HasSuffix(f, "postgres.tar") }) {
				t.Skip("SKIPPED: no PostgreSQL image: Debian's postgresql is not installed (scripts/install-test-deps.sh)")
			}
			serverReplicasKilled(ctx, t, kc, cnp)
		})
	}

	// Everything undeployed.
	t0 = time.Now()
	out, errOut, err = cnp(3*time.Minute, "k8s", "undeploy", "--wait", "2m")
	if err != nil {
		t.Fatalf("cnperf k8s undeploy: %v\n%s\n%s", err, out, errOut)
	}
	st, err := kc.Status(ctx)
	if err != nil || st.Deployed {
		t.Errorf("after undeploy: deployed %v, err %v", st.Deployed, err)
	}
	pods, err := kc.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left after undeploy: %d (%v)", len(pods.Items), err)
	}
	t.Logf("cnperf k8s undeploy in %v:\n%s", time.Since(t0).Round(time.Second), out)
}

// storedReport prints a run as `cnperf report` shows it, read back from
// the server in the cluster through a port-forward.
func storedReport(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, runID string) string {
	t.Helper()
	return fromServer(ctx, t, kc, cnp, "report", runID)
}

// serverAPI opens a port-forward to the server in the cluster and
// returns it (the caller closes it), the user token from the cluster's
// Secret and an HTTP client that trusts the server's certificate.
func serverAPI(ctx context.Context, t *testing.T, kc *k8s.Client) (*k8s.Forward, string, *http.Client) {
	t.Helper()
	fw, err := kc.ForwardServer(ctx, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := kc.Tokens(ctx)
	if err != nil {
		fw.Close()
		t.Fatal(err)
	}
	hc, err := fw.HTTPClient(30 * time.Second)
	if err != nil {
		fw.Close()
		t.Fatal(err)
	}
	return fw, tok, hc
}

// fromServer runs a cnperf verb that reads stored runs (report, compare)
// against the server in the cluster through a port-forward, with the user
// token from the cluster's Secret.
func fromServer(ctx context.Context, t *testing.T, kc *k8s.Client, cnp cnpFunc, args ...string) string {
	t.Helper()
	fw, err := kc.ForwardServer(ctx, 30*time.Second)
	if err != nil {
		t.Errorf("port-forward for cnperf %s: %v", args[0], err)
		return ""
	}
	defer fw.Close()
	tok, _, err := kc.Tokens(ctx)
	if err != nil {
		t.Errorf("token: %v", err)
		return ""
	}
	args = append(args, "--server", fw.URL, "--token", tok)
	if fw.TLS != nil { // the CLI verifies the server as a user outside the cluster would
		caFile := filepath.Join(t.TempDir(), "ca.crt")
		if err := os.WriteFile(caFile, fw.TLS.CAPEM, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--ca-file", caFile, "--tls-server-name", fw.TLS.ServerName)
	}
	out, errOut, err := cnp(time.Minute, args...)
	if err != nil {
		t.Errorf("cnperf %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// row is a suite row as the JSON output writes it: figures (medians) as
// nested objects at the top level, labels as top-level strings.
type row struct {
	Connection string
	Src, Dst   string
	Labels     map[string]string
	Median     map[string]float64
}

func (r *row) UnmarshalJSON(b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	r.Labels, r.Median = map[string]string{}, map[string]float64{}
	var walk func(prefix string, v map[string]any)
	walk = func(prefix string, v map[string]any) {
		for k, x := range v {
			switch t := x.(type) {
			case float64:
				r.Median[prefix+k] = t
			case string:
				if prefix == "" {
					r.Labels[k] = t
				}
			case map[string]any:
				if prefix == "" && (k == "min" || k == "max") {
					continue
				}
				walk(prefix+k+".", t)
			}
		}
	}
	walk("", m)
	r.Connection, r.Src, r.Dst = r.Labels["connection"], r.Labels["src"], r.Labels["dst"]
	return nil
}

// seedWorkflow replays the seed's user workflow over the v1 API through
// a port-forward to the server pod: the clients list with the pods'
// Downward API identity, a ping and an iperf task, their results.
func seedWorkflow(ctx context.Context, t *testing.T, kc *k8s.Client, agents []k8s.Agent) {
	fw, tok, hc := serverAPI(ctx, t, kc)
	defer fw.Close()
	v1 := func(method, path string, body, data any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, fw.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		var env struct {
			Status int             `json:"status"`
			Msg    string          `json:"msg"`
			Data   json.RawMessage `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&env); err != nil || resp.StatusCode != 200 || env.Status != 0 {
			t.Fatalf("%s %s: HTTP %d status %d msg %q err %v", method, path, resp.StatusCode, env.Status, env.Msg, err)
		}
		if err := json.Unmarshal(env.Data, data); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	var clients []api.Client
	v1("GET", "/api/v1/external/clients", nil, &clients)
	byUID := map[string]api.Client{}
	for _, c := range clients {
		byUID[c.PodUID] = c
	}
	var src, dst api.Client
	for _, a := range agents {
		c, ok := byUID[a.UID]
		if !ok {
			t.Errorf("agent pod %s (uid %s) not in the clients list", a.Name, a.UID)
			continue
		}
		if c.PodName != a.Name || c.PodIP != a.IP || c.NodeName != a.Node || c.NodeIP != a.NodeIP {
			t.Errorf("client %+v does not carry pod %+v's Downward API identity", c, a)
		}
		if !a.HostNetwork && a.Component == "pod" {
			if a.Node == "kcn-node2" {
				src = c
			} else {
				dst = c
			}
		}
	}
	t.Logf("clients list: %d online agents, e.g. %s uid %s ip %s node %s", len(clients), src.PodName, src.PodUID, src.PodIP, src.NodeName)
	if src.PodUID == "" || dst.PodUID == "" {
		t.Fatalf("no pod agents on both nodes in %+v", clients)
	}
	var ids []string
	v1("POST", "/api/v1/external/task/create", []api.TaskCreate{
		{SrcPodUID: src.PodUID, SrcPodIP: src.PodIP, DstPodUID: dst.PodUID, DstPodIP: dst.PodIP, TaskParam: "-c 5 -i 0.2", TaskType: "ping"},
		{SrcPodUID: src.PodUID, SrcPodIP: src.PodIP, DstPodUID: dst.PodUID, DstPodIP: dst.PodIP, TaskParam: "-t 2 -i 1 -f M", TaskType: "iperf"},
	}, &ids)
	if len(ids) != 2 {
		t.Fatalf("task ids: %v", ids)
	}
	want := []string{"5 packets transmitted, 5 received", "MBytes/sec"}
	for i, id := range ids {
		var task api.Task
		deadline := time.Now().Add(90 * time.Second)
		for {
			v1("GET", "/api/v1/external/task?task_id="+id, nil, &task)
			if task.TaskStatus >= api.TaskStatusFinished {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s still %d after 90s", id, task.TaskStatus)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if task.TaskStatus != api.TaskStatusFinished || !strings.Contains(task.TaskResult, want[i]) {
			t.Errorf("task %s (%s): TaskStatus %d reason %q result %.600q", id, task.TaskType, task.TaskStatus, task.TaskReason, task.TaskResult)
			continue
		}
		t.Logf("task %s %s %s -> %s: TaskStatus %d, result ends %q", task.TaskType, id, task.SrcPodIP, task.DstPodIP, task.TaskStatus, tail(task.TaskResult, 160))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
