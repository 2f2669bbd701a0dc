package server

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/figure"
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

// openSession opens uid's session with cl (uid: hello's), closed when
// the test ends.
func openSession(t *testing.T, cl *client.Client, hello api.Heartbeat, onOffer func(*client.Session, api.FetchReply)) *client.Session {
	t.Helper()
	s, err := cl.OpenSession(context.Background(), hello.PodUID, hello, onOffer)
	if err != nil {
		t.Fatalf("open %s's session: %v", hello.PodUID, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
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
	at := reofferedOnce(t, s2, offers, ids[0], 5*time.Second, f.srv.opts.ReofferAfter)
	t.Logf("lost offer re-offered after %v", at.Sub(lost))
}

// TestSessionReofferLostPoll: a task a REST long poll claimed after the
// agent's session opened, whose answer was lost (the agent had moved to
// the session and dropped its poll), is offered on the session once due,
// not left dispatched until its deadline or the next heartbeat: whether
// the poll claims it before the session's first look at its offers or
// after it (a loaded machine: that look came and found nothing, and
// nothing looked again).
func TestSessionReofferLostPoll(t *testing.T) { storetest.ForEach(t, testSessionReofferLostPoll) }

func testSessionReofferLostPoll(t *testing.T, dsn string) {
	for _, tc := range []struct {
		name string
		// pollAfter: how long after the session opened the poll claims
		// the task, in ReofferAfters (its first look comes at 1 and
		// 100 ms).
		pollAfter float64
	}{
		{"before the session's first look", 0.5},
		{"after the session's first look", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := sessionFixture(t, dsn)
			ctx := context.Background()
			f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
			onOffer, offers := offerSink()
			s, err := f.agent.OpenSession(ctx, "uid-a", helloOf("uid-a", "pod-a", "10.244.1.12", "node-1"), onOffer)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			time.Sleep(time.Duration(tc.pollAfter * float64(f.srv.opts.ReofferAfter)))
			ids, err := f.user.CreateTasks(ctx, []api.TaskCreate{pingTask("-c 1")})
			if err != nil {
				t.Fatal(err)
			}
			if fr, err := f.agent.Fetch(ctx, "uid-a", 0); err != nil || len(fr.Tasks) != 1 {
				t.Fatalf("poll: %+v %v, want the task", fr, err)
			}
			lost := time.Now()
			if err := s.Pull(); err != nil {
				t.Fatal(err)
			}
			at := reofferedOnce(t, s, offers, ids[0], 10*time.Second, f.srv.opts.ReofferAfter)
			t.Logf("the lost poll's task offered on the session after %v", at.Sub(lost))
		})
	}
}

// reofferedOnce checks that the session is offered the task id within
// limit, acknowledges it, pulls, and that nothing is offered again for
// four re-offer periods. It returns when the offer came.
func reofferedOnce(t *testing.T, s *client.Session, offers chan api.FetchReply, id string, limit, reofferAfter time.Duration) time.Time {
	t.Helper()
	fr := nextOffer(t, offers, limit)
	at := time.Now()
	if len(fr.Tasks) != 1 || fr.Tasks[0].TaskID != id {
		t.Fatalf("offer %+v, want task %s again", fr, id)
	}
	if err := s.Ack([]string{id}); err != nil {
		t.Fatal(err)
	}
	if err := s.Pull(); err != nil {
		t.Fatal(err)
	}
	select {
	case fr := <-offers:
		t.Fatalf("offered again after the ack: %+v", fr)
	case <-time.After(4 * reofferAfter):
	}
	return at
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
	quiet := openSession(t, f.agent, helloOf("uid-q", "pod-q", "10.244.1.2", "node-1"), nil)
	talker := openSession(t, f.agent, helloOf("uid-t", "pod-t", "10.244.1.3", "node-1"), nil)
	opened := time.Now()
	if err := f.srv.flushBeats(ctx); err != nil { // the sessions are held
		t.Fatal(err)
	}
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
	// Never before its silence; that the sweep ends it within a second of
	// its period is the machine's scheduling (a figure).
	if ended == 0 || ended < silence {
		t.Errorf("silent session ended after %v (0: not within 4 s), want at least %v", ended, silence)
	}
	figure.Check(t, ended <= silence+sweepEvery+time.Second, "silent session ended after %v, want within [%v, %v]", ended, silence, silence+sweepEvery+time.Second)
	select {
	case <-talker.Done():
		t.Errorf("the session sending keep-alives ended: %v", talker.Err())
	default:
	}
	if f.srv.Sessions() != 1 {
		t.Errorf("%d sessions open, want 1", f.srv.Sessions())
	}
	// The silent agent is released as of its last frame (the hello), not
	// of the session's end: a reaper counts its silence from then.
	if err := f.srv.flushBeats(ctx); err != nil {
		t.Fatal(err)
	}
	if g, err := f.st.GetAgent(ctx, "uid-q"); err != nil || !g.LastHeartbeat.Before(opened.Add(silence)) {
		t.Errorf("the silent agent's stored time %v (%v), want before %v (its last frame, not the session's end)", g.LastHeartbeat, err, opened.Add(silence))
	}
}

// TestSessionPresenceLease: an agent holding a session is written to the
// store once, as held by the replica's presence lease, and stays online
// for a reaper that sees only the store (a leader on another replica)
// however long no keep-alive comes, while the replica renews its lease;
// its time is not rewritten meanwhile. Once the session ends, the agent is
// released and goes offline OfflineAfter after the release; a replica
// that stops renewing its lease loses its agents once it expired.
func TestSessionPresenceLease(t *testing.T) { storetest.ForEach(t, testSessionPresenceLease) }

func testSessionPresenceLease(t *testing.T, dsn string) {
	f := newFixture(t, dsn, nil)
	var ahead atomic.Int64 // the server's clock runs this far ahead of time.Now
	f.srv.now = func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	ctx := context.Background()
	// What a leader on another replica would mark offline now.
	otherReaper := func() []string {
		t.Helper()
		now := f.srv.now()
		off, err := f.st.MarkSilentOffline(ctx, now.Add(-f.srv.opts.OfflineAfter), now)
		if err != nil {
			t.Fatal(err)
		}
		var uids []string
		for _, a := range off {
			uids = append(uids, a.PodUID)
		}
		return uids
	}
	flushAt := func(d time.Duration) {
		t.Helper()
		ahead.Store(int64(d))
		if err := f.srv.flushBeats(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, uid := range []string{"uid-p", "uid-q"} {
		s, err := f.agent.OpenSession(ctx, uid, helloOf(uid, "pod-"+uid, "10.244.1.30", "node-1"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
	}
	flushAt(0)
	held, err := f.st.GetAgent(ctx, "uid-p")
	if err != nil {
		t.Fatal(err)
	}
	// 30 s without a keep-alive, the replica flushing (and renewing its
	// lease every ReapEvery) as it runs.
	for d := time.Second; d <= 30*time.Second; d += time.Second {
		flushAt(d)
	}
	if off := otherReaper(); len(off) != 0 {
		t.Fatalf("agents held by a live presence lease marked offline: %v", off)
	}
	if got, _ := f.st.GetAgent(ctx, "uid-p"); !got.LastHeartbeat.Equal(held.LastHeartbeat) {
		t.Errorf("a held agent's time was rewritten: %v, held at %v", got.LastHeartbeat, held.LastHeartbeat)
	}
	// uid-p's session ends: released at the next flush, offline
	// OfflineAfter later.
	f.srv.sessions.end("uid-p", &sessionEnded{status: http.StatusServiceUnavailable, msg: "test"})
	deadline := time.Now().Add(5 * time.Second)
	for f.srv.Sessions() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	flushAt(31 * time.Second)
	ahead.Store(int64(40 * time.Second))
	if off := otherReaper(); len(off) != 0 {
		t.Fatalf("offline 9 s after its release: %v", off)
	}
	ahead.Store(int64(42 * time.Second))
	if off := otherReaper(); len(off) != 1 || off[0] != "uid-p" {
		t.Fatalf("11 s after the release of uid-p's session, offline %v; want [uid-p]", off)
	}
	// The replica stops renewing (it died): uid-q goes offline once its
	// lease (renewed last at 30 s) expired.
	ahead.Store(int64(30*time.Second + f.srv.presenceTTL() - time.Second))
	if off := otherReaper(); len(off) != 0 {
		t.Fatalf("offline before the lease expired: %v", off)
	}
	ahead.Store(int64(31*time.Second + f.srv.presenceTTL()))
	if off := otherReaper(); len(off) != 1 || off[0] != "uid-q" {
		t.Fatalf("after the lease expired, offline %v; want [uid-q]", off)
	}
}
