package server

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// sessionFixture is a fixture on the real clock (sessions re-offer on
// timers) with a short re-offer delay.
func sessionFixture(t *testing.T, dsn string) *fixture {
	f := newFixture(t, dsn, nil)
	f.srv.now = time.Now
	f.srv.opts.ReofferAfter = 300 * time.Millisecond
	return f
}

func helloOf(uid, name, ip, node string) api.Heartbeat {
	return api.Heartbeat{PodUID: uid, PodName: name, PodIP: ip, NodeName: node, ResponderAddr: ip + ":5201", BootID: "boot-" + uid}
}

// offers collects a session's offers.
func offerSink() (func(*client.Session, api.FetchReply), chan api.FetchReply) {
	ch := make(chan api.FetchReply, 16)
	return func(_ *client.Session, fr api.FetchReply) { ch <- fr }, ch
}

func nextOffer(t *testing.T, ch chan api.FetchReply, within time.Duration) api.FetchReply {
	t.Helper()
	select {
	case fr := <-ch:
		return fr
	case <-time.After(within):
		t.Fatalf("no offer within %v", within)
		return api.FetchReply{}
	}
}

// TestSessionLifecycle: a session registers the agent with its hello,
// answers keep-alives, hands a task created after the pull at once, and
// carries start and the report (a repeat is a duplicate, stored once).
func TestSessionLifecycle(t *testing.T) { storetest.ForEach(t, testSessionLifecycle) }

func testSessionLifecycle(t *testing.T, dsn string) {
	f := sessionFixture(t, dsn)
	ctx := context.Background()
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
	onOffer, offers := offerSink()
	s, err := f.agent.OpenSession(ctx, "uid-a", helloOf("uid-a", "pod-a", "10.244.1.12", "node-1"), onOffer)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Welcome().AgentID == 0 || s.KeepalivePeriod() != api.DefaultKeepalive {
		t.Fatalf("welcome %+v, keep-alive %v", s.Welcome(), s.KeepalivePeriod())
	}
	if !f.srv.beats.online("uid-a") || f.srv.Sessions() != 1 {
		t.Fatalf("after hello: online %v, sessions %d", f.srv.beats.online("uid-a"), f.srv.Sessions())
	}
	before := f.srv.beats.lastBeat("uid-a")
	time.Sleep(20 * time.Millisecond)
	if _, err := s.Keepalive(ctx); err != nil {
		t.Fatal(err)
	}
	if after := f.srv.beats.lastBeat("uid-a"); !after.After(before) {
		t.Errorf("keep-alive did not refresh the agent's time: %v then %v", before, after)
	}
	if err := s.Pull(); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if err != nil {
		t.Fatal(err)
	}
	fr := nextOffer(t, offers, 2*time.Second)
	if len(fr.Tasks) != 1 || fr.Tasks[0].TaskID != ids[0] {
		t.Fatalf("offer %+v, want task %s", fr, ids[0])
	}
	t.Logf("task created -> offered on the session: %v", time.Since(created))
	if err := s.Ack([]string{ids[0]}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	rep := api.Report{TaskID: ids[0], PodUID: "uid-a", ReportID: "r1", State: api.StateSucceeded, TaskResult: "ok"}
	for i, wantDup := range []bool{false, true} {
		rr, err := s.Report(ctx, rep)
		if err != nil || rr.Duplicate != wantDup || rr.State != api.StateSucceeded {
			t.Fatalf("report %d: %+v %v (want duplicate %v)", i, rr, err, wantDup)
		}
	}
	task, err := f.st.GetTask(ctx, ids[0])
	if err != nil || task.State != store.TaskSucceeded {
		t.Fatalf("stored task %+v %v", task, err)
	}
	// A refused frame answers the REST endpoint's status; the session stays.
	if err := s.Start(ctx, ids[0]); api.StatusOf(err) != http.StatusConflict {
		t.Errorf("start of a finished task: %v, want 409", err)
	}
	if _, err := s.Keepalive(ctx); err != nil {
		t.Errorf("keep-alive after a refused frame: %v", err)
	}
	if n := f.srv.offers.len(); n != 0 {
		t.Errorf("%d offers held after the report", n)
	}
}

// TestSessionReoffer: an offer whose session broke before the agent acked
// it is offered again on the agent's next session, once, with the same
// id; acked, it is not offered again.
func TestSessionReoffer(t *testing.T) { storetest.ForEach(t, testSessionReoffer) }

func testSessionReoffer(t *testing.T, dsn string) {
	f := sessionFixture(t, dsn)
	ctx := context.Background()
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
	hello := helloOf("uid-a", "pod-a", "10.244.1.12", "node-1")
	onOffer, offers := offerSink()
	s1, err := f.agent.OpenSession(ctx, "uid-a", hello, onOffer)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Pull(); err != nil {
		t.Fatal(err)
	}
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if err != nil {
		t.Fatal(err)
	}
	if fr := nextOffer(t, offers, 2*time.Second); len(fr.Tasks) != 1 {
		t.Fatalf("first offer %+v", fr)
	}
	s1.Close() // "lost": never acked
	lost := time.Now()

	s2, err := f.agent.OpenSession(ctx, "uid-a", hello, onOffer)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Pull(); err != nil {
		t.Fatal(err)
	}
	fr := nextOffer(t, offers, 5*time.Second)
	if len(fr.Tasks) != 1 || fr.Tasks[0].TaskID != ids[0] {
		t.Fatalf("re-offer %+v, want task %s", fr, ids[0])
	}
	t.Logf("lost offer re-offered after %v", time.Since(lost))
	if err := s2.Ack([]string{ids[0]}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Pull(); err != nil {
		t.Fatal(err)
	}
	select {
	case fr := <-offers:
		t.Fatalf("offered again after the ack: %+v", fr)
	case <-time.After(4 * f.srv.opts.ReofferAfter):
	}
}

// TestSessionIdentity: a session acts for its own agent only, exactly as
// the REST endpoints: another agent's session, heartbeat, start, report
// or serving is 403; a revoked credential ends the session (401) and
// cannot open another.
func TestSessionIdentity(t *testing.T) { storetest.ForEach(t, testSessionIdentity) }

func testSessionIdentity(t *testing.T, dsn string) {
	f := sessionFixture(t, dsn)
	ctx := context.Background()
	join := func(uid string) *client.Client {
		jr, err := f.agent.Join(ctx, uid)
		if err != nil {
			t.Fatalf("join %s: %v", uid, err)
		}
		return f.agent.WithToken(jr.Token)
	}
	a, b := join("uid-a"), join("uid-b")
	helloA, helloB := helloOf("uid-a", "pod-a", "10.244.1.12", "node-1"), helloOf("uid-b", "pod-b", "10.244.2.7", "node-2")
	onOffer, offers := offerSink()
	sb, err := b.OpenSession(ctx, "uid-b", helloB, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	sa, err := a.OpenSession(ctx, "uid-a", helloA, onOffer)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	if err := sa.Pull(); err != nil {
		t.Fatal(err)
	}
	ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
	if err != nil {
		t.Fatal(err)
	}
	if fr := nextOffer(t, offers, 2*time.Second); len(fr.Tasks) != 1 {
		t.Fatalf("A's offer %+v", fr)
	}
	task := ids[0]
	opens := []struct {
		name  string
		cl    *client.Client
		uid   string
		hello api.Heartbeat
		want  int
	}{
		{"B opens A's session", b, "uid-a", helloA, http.StatusForbidden},
		{"B opens its session with A's hello", b, "uid-b", helloA, http.StatusForbidden},
		{"the join token opens A's session", f.agent, "uid-a", helloA, http.StatusForbidden},
		{"the user token opens a session", f.user, "uid-a", helloA, http.StatusUnauthorized},
	}
	for _, c := range opens {
		_, err := c.cl.OpenSession(ctx, c.uid, c.hello, nil)
		t.Logf("%-40s -> %v", c.name, err)
		if api.StatusOf(err) != c.want {
			t.Errorf("%s: %v, want %d", c.name, err, c.want)
		}
	}
	forged := api.Report{TaskID: task, PodUID: "uid-b", ReportID: "forged", State: api.StateSucceeded, TaskResult: "forged"}
	frames := []struct {
		name string
		call func() error
	}{
		{"B's session starts A's task", func() error { return sb.Start(ctx, task) }},
		{"B's session reports A's task as B", func() error { _, err := sb.Report(ctx, forged); return err }},
		{"B's session reports A's task as A", func() error {
			r := forged
			r.PodUID = "uid-a"
			_, err := sb.Report(ctx, r)
			return err
		}},
		{"B's session serves as A", func() error { return sb.Serving(ctx, task, api.Serving{PodUID: "uid-a", Port: 5999}) }},
		{"B's session heartbeats as A", func() error { _, err := sb.Heartbeat(ctx, helloA); return err }},
	}
	for _, c := range frames {
		err := c.call()
		t.Logf("%-40s -> %v", c.name, err)
		if api.StatusOf(err) != http.StatusForbidden {
			t.Errorf("%s: %v, want 403", c.name, err)
		}
	}
	if got, err := f.st.GetTask(ctx, task); err != nil || got.State != store.TaskDispatched {
		t.Fatalf("A's task after the attempts: %+v %v, want still dispatched", got.State, err)
	}
	if _, err := f.user.RevokeAgent(ctx, "uid-a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sa.Done():
		if api.StatusOf(sa.Err()) != http.StatusUnauthorized {
			t.Errorf("revoked session ended with %v, want 401", sa.Err())
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the revoked agent's session is still open")
	}
	if _, err := a.OpenSession(ctx, "uid-a", helloA, nil); api.StatusOf(err) != http.StatusUnauthorized {
		t.Errorf("session with a revoked credential: %v, want 401", err)
	}
}

// TestSessionSilenceEnds: the sweeper ends a session that sends nothing
// for two keep-alive periods and a second, and keeps one whose
// keep-alives come on time (no per-frame deadlines).
func TestSessionSilenceEnds(t *testing.T) {
	f := sessionFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	f.srv.opts.SessionKeepalive = 200 * time.Millisecond // silence: 1.4 s
	ctx := context.Background()
	quiet, err := f.agent.OpenSession(ctx, "uid-q", helloOf("uid-q", "pod-q", "10.244.1.2", "node-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	talker, err := f.agent.OpenSession(ctx, "uid-t", helloOf("uid-t", "pod-t", "10.244.1.3", "node-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer talker.Close()
	opened := time.Now()
	var ended time.Duration
	for time.Since(opened) < 4*time.Second && ended == 0 {
		if _, err := talker.Keepalive(ctx); err != nil {
			t.Fatalf("keep-alive on time failed after %v: %v", time.Since(opened), err)
		}
		select {
		case <-quiet.Done():
			ended = time.Since(opened)
		case <-time.After(150 * time.Millisecond):
		}
	}
	silence := f.srv.sessionSilence()
	t.Logf("silent session ended after %v (limit %v): %v", ended.Round(time.Millisecond), silence, quiet.Err())
	if ended < silence || ended > silence+sweepEvery+time.Second {
		t.Errorf("silent session ended after %v, want within [%v, %v]", ended, silence, silence+sweepEvery+time.Second)
	}
	select {
	case <-talker.Done():
		t.Errorf("the session sending keep-alives ended: %v", talker.Err())
	default:
	}
	if f.srv.Sessions() != 1 {
		t.Errorf("%d sessions open, want 1", f.srv.Sessions())
	}
}

// TestSessionPresenceFlushed: an agent holding a session is written to the
// store as present at every flush, keep-alive or not, so a leader on
// another replica (which sees only the stored time) does not mark it
// offline while a loaded machine delays its keep-alives.
func TestSessionPresenceFlushed(t *testing.T) { storetest.ForEach(t, testSessionPresenceFlushed) }

func testSessionPresenceFlushed(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	var ahead atomic.Int64 // the server's clock runs this far ahead of time.Now
	f.srv.now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	ctx := context.Background()
	s, err := f.agent.OpenSession(ctx, "uid-p", helloOf("uid-p", "pod-p", "10.244.1.30", "node-1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	registered, err := f.st.GetAgent(ctx, "uid-p")
	if err != nil {
		t.Fatal(err)
	}
	ahead.Store(int64(6 * time.Second)) // no keep-alive in those 6 s
	if err := f.srv.flushBeats(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := f.st.GetAgent(ctx, "uid-p")
	if err != nil {
		t.Fatal(err)
	}
	if lag := got.LastHeartbeat.Sub(registered.LastHeartbeat); lag < 5*time.Second {
		t.Errorf("stored heartbeat moved %v after 6 s with the session open (registered %v, now %v), want >= 5 s",
			lag, registered.LastHeartbeat, got.LastHeartbeat)
	}
}
