package e2e_test

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// TestReplicasSurviveSIGKILL runs three `cnperf server` replicas on one
// PostgreSQL and six real `cnperf agent` processes spread over them (each
// given all three URLs, starting at a different one). The agents hold
// sessions (their default): the fronts relay them frame by frame and
// count offers, starts and reports (and the REST calls of an agent that
// polls meanwhile). It measures how fast a task created on one replica
// reaches an agent whose session another replica holds (created → the
// agent's start frame), asserting that crossing replicas adds at most 10
// ms to the p50 of an agent of the creating replica, measured
// alternately; the absolute targets of #12 (p50 < 10 ms, p99 < 100 ms)
// are printed met or MISSED with the load, not asserted (a speed target
// is a benchmark's verdict, not a timed test's: docs/control-plane.md,
// "Dispatch across replicas"), then creates a run of
// 1,000 tasks on one replica, SIGKILLs the replica holding the reaper's
// lease (and sessions) while they are in flight, and checks that every
// task succeeds with its result stored once, no task runs twice, the
// agents of the killed replica hold sessions on the others within 10 s,
// and another replica takes the lease over.
func TestReplicasSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs processes; skipped with -short")
	}
	dsn := storetest.PostgresDSN(t) // skips loudly without the test PostgreSQL
	dir := t.TempDir()
	bin := cnperftest.Binary(t)
	srvEnv := []string{"CNPERF_USER_TOKEN=u-repl", "CNPERF_AGENT_TOKEN=a-repl"}

	const replicas = 3
	l := newReplicaLog(replicas)
	var srvs []*proc
	var bases, fronts []string
	for i := range replicas {
		addr := freeAddr(t)
		p := start(t, fmt.Sprintf("replica-%d", i), bin, srvEnv, append([]string{"server", "--listen", addr, "--db", dsn}, loopbackServer...)...)
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
		hs := &http.Server{Handler: &front{idx: i, upstream: bases[i], proxy: rp, log: l}, ReadHeaderTimeout: 5 * time.Second}
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
		p := start(t, names[i], bin, []string{"CNPERF_AGENT_TOKEN=a-repl", "POD_NAME=" + names[i], "POD_NAMESPACE=e2e", "POD_UID=uid-" + names[i],
			"POD_IP=" + ip, "NODE_NAME=node-" + names[i], "NODE_IP=" + ip},
			"agent", "--server", strings.Join(list, ","), "--responder-port", "0", "--stamp-port", "0", "--state-dir", filepath.Join(dir, names[i]))
		p.waitFor(t, "agent ready", 30*time.Second)
	}
	// User calls go to a replica that will survive, not through a front.
	userRepl := (leader + 1) % replicas
	user := httpc{t: t, base: bases[userRepl], token: "u-repl"}

	// Every agent holds a session, the leader some of them.
	heldBy := waitSessions(t, l, names, 30*time.Second)
	if !slices.Contains(heldBy, leader) {
		t.Fatalf("sessions held by fronts %v: the leader (%d) holds none", heldBy, leader)
	}

	// Dispatch to a session, one task at a time, created on userRepl:
	// alternately for an agent whose session another replica holds
	// (cross) and for one whose session userRepl holds (same, the
	// reference measured under the same load); latency from the create
	// request to the offer frame carrying it and to the agent's start
	// frame (the agent starts it).
	cross, same := -1, -1
	for i := range agents {
		if heldBy[i] != userRepl && cross < 0 {
			cross = i
		}
		if heldBy[i] == userRepl && same < 0 {
			same = i
		}
	}
	if cross < 0 || same < 0 {
		t.Fatalf("sessions held by fronts %v: want agents on replica %d and on another", heldBy, userRepl)
	}
	const samples = 200
	load0 := loadAvg1()
	var lat [2]dispatchTimes // cross, same
	for i := range 2 * samples {
		src := [2]int{cross, same}[i%2]
		sent := time.Now()
		var run api.Run
		rc := api.RunCreate{AllowConcurrency: true, Tasks: []api.RunTask{{Src: names[src], Dst: names[(src+1)%agents], Spec: &probe.Spec{Kind: "rr", Count: 5}}}}
		if code := user.call("POST", "/api/v2/runs", rc, &run); code != http.StatusCreated {
			t.Fatalf("create run: %d", code)
		}
		answered := time.Since(sent)
		id := run.Tasks[0].TaskID
		deadline := time.Now().Add(10 * time.Second)
		for {
			l.mu.Lock()
			h := l.handed[id]
			st, ok := l.started[id]
			l.mu.Unlock()
			if ok && len(h) > 0 {
				lat[i%2].add(answered, h[0].Sub(sent), st.Sub(sent))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s created on replica %d did not start at %s (session on replica %d) within 10s", id, userRepl, names[src], heldBy[src])
			}
			select {
			case <-l.startCh:
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	load := max(load0, loadAvg1())
	for k, what := range []string{"cross-replica", "same replica (reference)"} {
		src := [2]int{cross, same}[k]
		t.Logf("%s dispatch (created on replica %d, session of %s on replica %d, %d tasks one at a time): %s; load average %.1f on %d CPUs",
			what, userRepl, names[src], heldBy[src], samples, lat[k].String(), load, runtime.NumCPU())
	}
	p50, p99 := lat[0].startPct(0.50), lat[0].startPct(0.99)
	ref50 := lat[1].startPct(0.50)
	// Crossing replicas adds a NOTIFY and the other replica's wake-up: a
	// millisecond on a quiet machine, tens on a loaded one. A task found
	// only by a periodic pass instead (the sweeper's second, the
	// re-offer's 2 s) would wait half that period at the median:
	// crossHopBound tells the two apart at any load; the figures
	// themselves are the benchmark's.
	if p50 > ref50+crossHopBound {
		t.Errorf("cross-replica dispatch p50 %v against %v on the same replica: crossing replicas costs more than %v, as if the task waited for a periodic pass rather than the NOTIFY", p50, ref50, crossHopBound)
	}
	verdict := "met"
	if p50 >= 10*time.Millisecond || p99 >= 100*time.Millisecond {
		verdict = "MISSED"
	}
	t.Logf("dispatch targets (p50 < 10ms, p99 < 100ms) %s: cross-replica p50 %v, p99 %v (same replica p50 %v); load average %.1f on %d CPUs",
		verdict, p50, p99, ref50, load, runtime.NumCPU())

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
	var held []string // agents whose session the leader holds
	for uid, f := range l.held {
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
	var polledMeanwhile []string
	for _, uid := range held {
		if l.polled[uid] > 0 {
			polledMeanwhile = append(polledMeanwhile, fmt.Sprintf("%s (%d REST heartbeats)", uid, l.polled[uid]))
		}
	}
	t.Logf("agents whose session the killed replica held: %d; sessions again on another within %v (each: %v); not moved: %v; polled meanwhile: %v; sessions welcomed by front: %v",
		len(held), lastOr(moves), moves, notMoved, polledMeanwhile, l.sessions)
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
		t.Errorf("the killed replica held no session: the test shows no move")
	}
	if len(notMoved) > 0 || lastOr(moves) > 10*time.Second {
		t.Errorf("agents of the killed replica held sessions on another within %v, not moved: %v; want all within 10s", lastOr(moves), notMoved)
	}
}

// crossHopBound bounds what crossing replicas may add to the median
// dispatch: a quarter of the sweeper's period (sweepEvery, 1 s).
const crossHopBound = 250 * time.Millisecond

// dispatchTimes are the latencies of tasks created one at a time: the
// create's answer, the offer and the agent's start, each from the create
// request sent.
type dispatchTimes struct{ answer, offer, start []time.Duration }

func (d *dispatchTimes) add(answer, offer, start time.Duration) {
	d.answer, d.offer, d.start = append(d.answer, answer), append(d.offer, offer), append(d.start, start)
}

func (d *dispatchTimes) startPct(q float64) time.Duration {
	return pct(slices.Sorted(slices.Values(d.start)), q)
}

func (d *dispatchTimes) String() string {
	a, o, s := slices.Sorted(slices.Values(d.answer)), slices.Sorted(slices.Values(d.offer)), slices.Sorted(slices.Values(d.start))
	return fmt.Sprintf("the create answered p50 %v p99 %v; created → offer p50 %v p99 %v; created → agent starts it p50 %v p99 %v max %v (targets p50 < 10ms, p99 < 100ms)",
		pct(a, 0.50), pct(a, 0.99), pct(o, 0.50), pct(o, 0.99), pct(s, 0.50), pct(s, 0.99), pct(s, 1))
}

// loadAvg1 is the machine's 1-minute load average (0 when unreadable).
func loadAvg1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// pct is the q quantile of sorted ds (q = 1: the largest).
func pct(ds []time.Duration, q float64) time.Duration {
	i := min(len(ds)-1, int(q*float64(len(ds))))
	return ds[i].Round(100 * time.Microsecond)
}

// waitSessions waits until every agent holds a session and returns the
// front holding each one's.
func waitSessions(t *testing.T, l *replicaLog, names []string, limit time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		l.mu.Lock()
		var by []int
		for _, n := range names {
			if f, ok := l.held["uid-"+n]; ok {
				by = append(by, f)
			}
		}
		l.mu.Unlock()
		if len(by) == len(names) {
			t.Logf("sessions of %v held by fronts %v", names, by)
			return by
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d agents hold a session after %v", len(by), len(names), limit)
		}
		time.Sleep(20 * time.Millisecond)
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
