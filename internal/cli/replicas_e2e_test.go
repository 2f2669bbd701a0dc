package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// replicaLog is what the fronts of all replicas saw, by task and by agent.
type replicaLog struct {
	mu       sync.Mutex                // guards every field below
	handed   map[string][]time.Time    // task id → times a fetch answer carried it
	reports  map[string]map[string]int // task id → report id → answers 200
	stored   map[string]int            // task id → reports stored (not duplicates)
	starts   map[string]int            // task id → start calls answered 2xx
	lastSeen map[string]int            // agent uid → front of its last accepted heartbeat
	movedAt  map[string]time.Time      // agent uid → first accepted heartbeat at another front after the kill
	killed   int                       // the front whose replica was killed (-1: none yet)
}

// front is a reverse proxy in front of one replica that records what
// passes (replicaLog). An agent reaching a killed replica through it gets
// 502, as from a load balancer without a live backend.
type front struct {
	idx   int
	proxy *httputil.ReverseProxy
	log   *replicaLog
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var hbUID string
	if r.Method == http.MethodPost && r.URL.Path == "/api/v2/agent/heartbeat" {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var hb api.Heartbeat
		_ = json.Unmarshal(body, &hb)
		hbUID = hb.PodUID
	}
	var rep api.Report
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/report") {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		_ = json.Unmarshal(body, &rep)
	}
	rec := &recorder{ResponseWriter: w}
	f.proxy.ServeHTTP(rec, r)
	if rec.code/100 != 2 {
		return
	}
	now := time.Now()
	l := f.log
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case hbUID != "":
		if l.killed >= 0 && l.lastSeen[hbUID] == l.killed && f.idx != l.killed {
			if _, ok := l.movedAt[hbUID]; !ok {
				l.movedAt[hbUID] = now
			}
		}
		if l.killed < 0 || f.idx != l.killed {
			l.lastSeen[hbUID] = f.idx
		}
	case r.Method == http.MethodGet && r.URL.Path == "/api/v2/agent/tasks":
		var fr api.FetchReply
		if json.Unmarshal(rec.body.Bytes(), &fr) == nil {
			for _, t := range fr.Tasks {
				l.handed[t.TaskID] = append(l.handed[t.TaskID], now)
			}
		}
	case strings.HasSuffix(r.URL.Path, "/start"):
		l.starts[filepath.Base(filepath.Dir(r.URL.Path))]++
	case strings.HasSuffix(r.URL.Path, "/report"):
		task := filepath.Base(filepath.Dir(r.URL.Path))
		if l.reports[task] == nil {
			l.reports[task] = map[string]int{}
		}
		l.reports[task][rep.ReportID]++
		var rr api.ReportReply
		if json.Unmarshal(rec.body.Bytes(), &rr) == nil && !rr.Duplicate {
			l.stored[task]++
		}
	}
}

// TestReplicasSurviveSIGKILL runs three `cnperf server` replicas on one
// PostgreSQL and six real `cnperf agent` processes spread over them (each
// given all three URLs, starting at a different one). The agents poll
// (--no-session): the fronts count fetch answers, starts and reports on
// the REST paths. It measures how
// fast a task created on one replica reaches an agent held by another,
// then creates a run of 1,000 tasks on one replica, SIGKILLs the replica
// holding the reaper's lease while they are in flight, and checks that
// every task succeeds with its result stored once, no task runs twice,
// the agents of the killed replica move to the others within 10 s, and
// another replica takes the lease over.
func TestReplicasSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dsn := storetest.PostgresDSN(t) // skips loudly without the test PostgreSQL
	dir := t.TempDir()
	bin := cnperftest.Binary(t)
	srvEnv := []string{"CNPERF_USER_TOKEN=u-repl", "CNPERF_AGENT_TOKEN=a-repl"}

	const replicas = 3
	l := &replicaLog{handed: map[string][]time.Time{}, reports: map[string]map[string]int{}, stored: map[string]int{},
		starts: map[string]int{}, lastSeen: map[string]int{}, movedAt: map[string]time.Time{}, killed: -1}
	var srvs []*proc
	var bases, fronts []string
	for i := range replicas {
		addr := freeAddr(t)
		p := start(t, fmt.Sprintf("replica-%d", i), bin, srvEnv, "server", "--listen", addr, "--db", dsn)
		srvs = append(srvs, p)
		bases = append(bases, "http://"+addr)
	}
	for i, p := range srvs {
		p.waitFor(t, "server listening", 30*time.Second)
		target, _ := url.Parse(bases[i])
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.ErrorLog = log.New(io.Discard, "", 0) // a killed replica's 502s are expected
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: &front{idx: i, proxy: rp, log: l}, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		t.Cleanup(func() { _ = hs.Close() })
		fronts = append(fronts, "http://"+ln.Addr().String())
	}
	// Exactly one replica leads (runs the reaper).
	leader := waitLeader(t, srvs, 30*time.Second)

	const agents = 6
	names := make([]string, agents)
	for i := range agents {
		names[i] = fmt.Sprintf("pod-%d", i)
		ip := fmt.Sprintf("127.0.0.%d", i+2)
		var list []string
		for k := range replicas {
			list = append(list, fronts[(i+k)%replicas]) // agent i starts at front i%3
		}
		p := start(t, names[i], bin, []string{"CNPERF_TOKEN=a-repl", "POD_NAME=" + names[i], "POD_NAMESPACE=e2e", "POD_UID=uid-" + names[i],
			"POD_IP=" + ip, "NODE_NAME=node-" + names[i], "NODE_IP=" + ip},
			"agent", "--no-session", "--server", strings.Join(list, ","), "--responder-port", "0", "--stamp-port", "0", "--state-dir", filepath.Join(dir, names[i]))
		p.waitFor(t, "agent ready", 30*time.Second)
	}
	// User calls go to a replica that will survive, not through a front.
	userRepl := (leader + 1) % replicas
	user := httpc{t: t, base: bases[userRepl], token: "u-repl"}

	// Cross-replica dispatch: a task created on userRepl for an agent held
	// by another replica, one at a time; latency from the create request
	// to the agent's fetch answer carrying it.
	src := -1
	for i := range agents {
		if i%replicas != userRepl {
			src = i
			break
		}
	}
	var lat []time.Duration
	for range 30 {
		sent := time.Now()
		var run api.Run
		rc := api.RunCreate{AllowConcurrency: true, Tasks: []api.RunTask{{Src: names[src], Dst: names[(src+1)%agents], Spec: &probe.Spec{Kind: "rr", Count: 5}}}}
		if code := user.call("POST", "/api/v2/runs", rc, &run); code != http.StatusCreated {
			t.Fatalf("create run: %d", code)
		}
		id := run.Tasks[0].TaskID
		deadline := time.Now().Add(10 * time.Second)
		for {
			l.mu.Lock()
			h := l.handed[id]
			l.mu.Unlock()
			if len(h) > 0 {
				lat = append(lat, h[0].Sub(sent))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s created on replica %d did not reach %s (held by replica %d) within 10s", id, userRepl, names[src], src%replicas)
			}
			time.Sleep(time.Millisecond)
		}
	}
	slices.Sort(lat)
	t.Logf("cross-replica dispatch (created on replica %d, agent held by replica %d, %d tasks): p50 %v, p90 %v, max %v",
		userRepl, src%replicas, len(lat), lat[len(lat)/2].Round(100*time.Microsecond), lat[len(lat)*9/10].Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond))
	if p50 := lat[len(lat)/2]; p50 > 500*time.Millisecond {
		t.Errorf("cross-replica dispatch p50 %v: the wake-up did not cross replicas (a long poll waits 25 s)", p50)
	}

	// 1,000 tasks in flight, the leader SIGKILLed.
	const n = 1000
	rc := api.RunCreate{AllowConcurrency: true}
	for i := range n {
		s := i % agents
		rc.Tasks = append(rc.Tasks, api.RunTask{Src: names[s], Dst: names[(s+1+i/agents%(agents-1))%agents], Spec: &probe.Spec{Kind: "rr", Count: 20}})
	}
	var run api.Run
	if code := user.call("POST", "/api/v2/runs", rc, &run); code != http.StatusCreated || len(run.Tasks) != n {
		t.Fatalf("create run: %d, %d tasks", code, len(run.Tasks))
	}
	inRun := map[string]bool{}
	for _, tk := range run.Tasks {
		inRun[tk.TaskID] = true
	}
	storedOfRun := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		k := 0
		for id, c := range l.stored {
			if inRun[id] && c > 0 {
				k++
			}
		}
		return k
	}
	deadline := time.Now().Add(120 * time.Second)
	for storedOfRun() < n/4 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d results stored after 120s", storedOfRun())
		}
		time.Sleep(10 * time.Millisecond)
	}
	atKill := storedOfRun()
	l.mu.Lock()
	var held []string // agents whose last heartbeat went to the leader
	for uid, f := range l.lastSeen {
		if f == leader {
			held = append(held, uid)
		}
	}
	l.killed = leader
	killedAt := time.Now()
	l.mu.Unlock()
	if err := srvs[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-srvs[leader].done

	// Another replica takes the lease over.
	var takeover time.Duration
	for takeover == 0 {
		for i, p := range srvs {
			if i != leader && strings.Contains(p.out.String(), "this replica leads") {
				takeover = time.Since(killedAt)
				t.Logf("replica %d took the reaper's lease over %v after the kill", i, takeover.Round(10*time.Millisecond))
			}
		}
		if takeover == 0 && time.Since(killedAt) > 40*time.Second {
			t.Fatal("no replica took the reaper's lease over within 40s of the leader's death")
		}
		time.Sleep(50 * time.Millisecond)
	}

	deadline = time.Now().Add(180 * time.Second)
	for {
		id := run.ID
		run = api.Run{}
		user.call("GET", "/api/v2/runs/"+id, nil, &run)
		if run.State != api.RunRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run still running 180s after the kill: %v", run.Counts)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Every task's result is in the store (read through a surviving
	// replica); a report stored just before the kill, whose answer died
	// with the replica, was answered as a duplicate by another.
	withResult := 0
	for _, tk := range run.Tasks {
		if tk.State == api.StateSucceeded && len(tk.Result) > 0 && string(tk.Result) != "null" {
			withResult++
		}
	}
	if len(run.Tasks) != n {
		t.Fatalf("the run lists %d tasks, want %d", len(run.Tasks), n)
	}
	noResult := n - withResult

	l.mu.Lock()
	defer l.mu.Unlock()
	var twiceStored, twiceRun, reoffered, startedTwice, dupAnswered int
	for id := range inRun {
		if l.stored[id] > 1 {
			twiceStored++
		}
		if len(l.reports[id]) > 1 {
			twiceRun++ // two executions: two report ids
		}
		if len(l.handed[id]) > 1 {
			reoffered++
		}
		if l.starts[id] > 1 {
			startedTwice++
		}
		if l.stored[id] == 0 {
			dupAnswered++ // stored by the killed replica, its answer lost
		}
	}
	var moves []time.Duration
	var notMoved []string
	for _, uid := range held {
		at, ok := l.movedAt[uid]
		if !ok {
			notMoved = append(notMoved, uid)
			continue
		}
		moves = append(moves, at.Sub(killedAt))
	}
	slices.Sort(moves)
	lost := n - run.Counts[api.StateSucceeded]
	t.Logf("replica %d (the leader) SIGKILLed after %d of %d results; run %s: %v", leader, atKill, n, run.State, run.Counts)
	t.Logf("tasks lost (not succeeded): %d; dispatched twice (two executions, i.e. two report ids): %d; results stored twice: %d; results lost (a task without its stored result): %d",
		lost, twiceRun, twiceStored, noResult)
	t.Logf("also: tasks handed out again (re-offers after the kill; the agent runs a task id once): %d; start calls answered twice: %d; reports stored by the killed replica whose answer was lost (the retry elsewhere was a duplicate): %d",
		reoffered, startedTwice, dupAnswered)
	t.Logf("agents held by the killed replica: %d; moved to another within %v (each: %v); not moved: %v", len(held), lastOr(moves), moves, notMoved)
	if lost != 0 || run.State != api.RunSucceeded {
		t.Errorf("run %s with %d of %d tasks not succeeded: %v", run.State, lost, n, run.Counts)
	}
	if twiceRun != 0 {
		t.Errorf("%d tasks ran twice", twiceRun)
	}
	if twiceStored != 0 {
		t.Errorf("%d results stored twice", twiceStored)
	}
	if noResult != 0 {
		t.Errorf("%d results lost", noResult)
	}
	if len(held) == 0 {
		t.Errorf("the killed replica held no agent: the test shows no move")
	}
	if len(notMoved) > 0 || lastOr(moves) > 10*time.Second {
		t.Errorf("agents of the killed replica moved within %v, not moved: %v; want all within 10s", lastOr(moves), notMoved)
	}
}

// lastOr returns the largest of sorted ds (0 when empty).
func lastOr(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)-1].Round(10 * time.Millisecond)
}

// waitLeader waits until exactly one replica says it leads and returns it.
func waitLeader(t *testing.T, srvs []*proc, limit time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var leads []int
		for i, p := range srvs {
			if strings.Contains(p.out.String(), "this replica leads") {
				leads = append(leads, i)
			}
		}
		switch {
		case len(leads) > 1:
			t.Fatalf("replicas %v all lead: the reaper would run more than once", leads)
		case len(leads) == 1:
			// Another lease period: still only one.
			time.Sleep(4 * time.Second)
			for i, p := range srvs {
				if i != leads[0] && strings.Contains(p.out.String(), "this replica leads") {
					t.Fatalf("replicas %d and %d both lead", leads[0], i)
				}
			}
			t.Logf("replica %d leads (holds the reaper's lease); the others do not", leads[0])
			return leads[0]
		case time.Now().After(deadline):
			t.Fatalf("no replica leads after %v", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
