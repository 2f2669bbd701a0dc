package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/store/storetest"
)

// heldSession opens uid's session on f and writes its presence (as the
// replica's next flush would), so that the store knows the agent is held;
// with pull, the agent asks for tasks.
func heldSession(t *testing.T, f *fixture, uid, ip, node string, pull bool) (chan api.FetchReply, func()) {
	t.Helper()
	onOffer, offers := offerSink()
	s, err := f.agent.OpenSession(context.Background(), uid, helloOf(uid, "pod-"+uid, ip, node), onOffer)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.flushBeats(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pull {
		if err := s.Pull(); err != nil {
			t.Fatal(err)
		}
	}
	return offers, func() { s.Close() }
}

// TestRunHandedOutAtCreation: a run's task whose source holds a session
// is claimed by the create call itself (the answer says dispatched) and
// offered on the session; a task whose source only polls stays pending
// for its own claim. Before, every task was created pending and waited
// for a claim transaction of its source's replica.
func TestRunHandedOutAtCreation(t *testing.T) { storetest.ForEach(t, testRunHandedOutAtCreation) }

func testRunHandedOutAtCreation(t *testing.T, dsn string) {
	f := sessionFixture(t, dsn)
	ctx := context.Background()
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
	f.beat("uid-poll", "pod-poll", "10.244.3.7", "node-3")
	offers, closeSession := heldSession(t, f, "uid-a", "10.244.1.12", "node-1", true)
	defer closeSession()
	spec := &probe.Spec{Kind: probe.KindPing}
	run, err := f.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{
		{Src: "uid-a", Dst: "uid-b", Spec: spec},
		{Src: "uid-poll", Dst: "uid-b", Spec: spec},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Tasks) != 2 || run.Tasks[0].State != api.StateDispatched || run.Tasks[0].DispatchedAt == nil || run.Tasks[1].State != api.StatePending {
		t.Fatalf("created run's tasks %+v; want the session's dispatched, the poller's pending", run.Tasks)
	}
	if run.Counts[string(store.TaskDispatched)] != 1 || run.Counts[string(store.TaskPending)] != 1 {
		t.Errorf("run counts %v", run.Counts)
	}
	fr := nextOffer(t, offers, 2*time.Second)
	if len(fr.Tasks) != 1 || fr.Tasks[0].TaskID != run.Tasks[0].TaskID || fr.Tasks[0].Deadline.IsZero() {
		t.Fatalf("offer %+v, want task %s with its deadline", fr, run.Tasks[0].TaskID)
	}
	got, err := f.agent.Fetch(ctx, "uid-poll", 0)
	if err != nil || len(got.Tasks) != 1 || got.Tasks[0].TaskID != run.Tasks[1].TaskID {
		t.Errorf("the poller's own claim: %+v %v", got, err)
	}
}

// TestHandOutThroughTheBus: a task claimed at its creation for an agent
// held by another replica goes to the bus as an offer (and not into this
// replica's mail); the replica holding the agent offers it from that
// message without a claim of its own.
func TestHandOutThroughTheBus(t *testing.T) {
	f := sessionFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	ctx := context.Background()
	bus := &recordingBus{}
	heldOnR2(t, f, bus)
	bus.take()
	run, err := f.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: "uid-far", Dst: "uid-b", Spec: &probe.Spec{Kind: probe.KindPing}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := run.Tasks[0].TaskID
	if run.Tasks[0].State != api.StateDispatched {
		t.Fatalf("task %s is %s, want dispatched at its creation", id, run.Tasks[0].State)
	}
	var offer *clusterMsg
	for _, call := range bus.take() {
		for _, raw := range call {
			var m clusterMsg
			if json.Unmarshal([]byte(raw), &m) == nil && m.Kind == msgOffer {
				offer = &m
			}
		}
	}
	if offer == nil || offer.Agent != "uid-far" || offer.Task != id {
		t.Fatalf("offer message %+v, want one for task %s to uid-far", offer, id)
	}
	if f.srv.disp.hasMail("uid-far") {
		t.Error("a task for an agent held elsewhere waits in this replica's mail")
	}

	// The same message at a replica that holds the agent: offered at once.
	g := sessionFixture(t, "sqlite:"+t.TempDir()+"/cnperf.db")
	g.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
	offers, closeSession := heldSession(t, g, "uid-far", "10.244.4.7", "node-4", true)
	defer closeSession()
	// The session's wake-up is in place a moment after its welcome.
	for deadline := time.Now().Add(5 * time.Second); !g.srv.disp.knows("uid-far"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the session's wake-up is not in place within 5 s")
		}
	}
	g.srv.applyRemote(*offer)
	fr := nextOffer(t, offers, 2*time.Second)
	if len(fr.Tasks) != 1 || fr.Tasks[0].TaskID != id {
		t.Fatalf("offer on the holding replica %+v, want task %s", fr, id)
	}
}

// TestUnofferedTaskFound: a task dispatched (claimed at its creation)
// whose offer never reached the agent's session, as when the bus message
// was lost, is offered once the leader's reaper looks for tasks still
// dispatched after 2 x ReofferAfter. Before, it waited for its deadline.
func TestUnofferedTaskFound(t *testing.T) { storetest.ForEach(t, testUnofferedTaskFound) }

func testUnofferedTaskFound(t *testing.T, dsn string) {
	f := sessionFixture(t, dsn)
	ctx := context.Background()
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
	// No pull: the session's own claim must not take the task first (a
	// re-offer answers the pull the offer was owed).
	offers, closeSession := heldSession(t, f, "uid-a", "10.244.1.12", "node-1", false)
	defer closeSession()
	// Created and claimed in the store, as another replica would, whose
	// offer message never came.
	tk := store.Task{SrcPodUID: "uid-a", SrcPodIP: "10.244.1.12", DstPodUID: "uid-b", DstPodIP: "10.244.2.7", Type: "ping", Param: "-c 1", Timeout: time.Minute}
	old := time.Now().Add(-3 * f.srv.opts.ReofferAfter)
	created, err := f.st.CreateTasks(ctx, "", []store.Task{tk}, old)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.st.ClaimCreated(ctx, []int64{created[0].ID}, old, 1, 0); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	select {
	case fr := <-offers:
		t.Fatalf("offered before the reaper looked: %+v", fr)
	case <-time.After(2 * f.srv.opts.ReofferAfter):
	}
	if _, err := f.srv.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	fr := nextOffer(t, offers, 5*f.srv.opts.ReofferAfter)
	if len(fr.Tasks) != 1 || fr.Tasks[0].TaskID != created[0].TaskID {
		t.Fatalf("offer %+v, want task %s", fr, created[0].TaskID)
	}
}

// directBus is a recordingBus that also addresses replicas (as pgnotify
// does): each message in a payload of its own on "direct_" + replica.
type directBus struct{ *recordingBus }

func (directBus) Direct(replica string, msgs []string) (string, []string) {
	return "direct_" + replica, msgs
}

// TestDirectOfferGoesWithTheCreation: on PostgreSQL, with a bus that
// addresses replicas, the offer of a task claimed at its creation for an
// agent held by another replica is sent by the creating transaction to
// that replica alone, and not published again after it.
func TestDirectOfferGoesWithTheCreation(t *testing.T) {
	dsn := storetest.PostgresDSN(t)
	f := sessionFixture(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bus := directBus{&recordingBus{}}
	heldOnR2(t, f, bus)
	listener, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(context.Background())
	if _, err := listener.Exec(ctx, "LISTEN direct_r2"); err != nil {
		t.Fatal(err)
	}
	bus.take()
	run, err := f.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: "uid-far", Dst: "uid-b", Spec: &probe.Spec{Kind: probe.KindPing}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := run.Tasks[0].TaskID
	n, err := listener.WaitForNotification(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m clusterMsg
	if err := json.Unmarshal([]byte(n.Payload), &m); err != nil || m.Kind != msgOffer || m.Agent != "uid-far" || m.Task != id {
		t.Fatalf("notice %q (%v), want an offer of task %s to uid-far", n.Payload, err, id)
	}
	for _, call := range bus.take() {
		for _, raw := range call {
			if json.Unmarshal([]byte(raw), &m) == nil && m.Kind == msgOffer {
				t.Errorf("the offer was published again after the commit: %s", raw)
			}
		}
	}
}

// heldOnR2 puts bus on f's server and, in its store, agents uid-b (no
// session) and uid-far, whose session replica r2 holds.
func heldOnR2(t *testing.T, f *fixture, bus Bus) {
	t.Helper()
	ctx := context.Background()
	f.srv.opts.Bus = bus
	f.srv.disp.share = f.srv.publish
	f.beat("uid-b", "pod-b", "10.244.2.7", "node-2")
	f.beat("uid-far", "pod-far", "10.244.4.7", "node-4")
	now := f.srv.now()
	if l, err := f.st.HoldLease(ctx, "presence r2", "r2", now, time.Minute); err != nil || !l.Held {
		t.Fatalf("hold r2's presence lease: %+v %v", l, err)
	}
	if _, err := f.st.SetPresence(ctx, "presence r2", []store.Presence{{PodUID: "uid-far", Held: true}}, now); err != nil {
		t.Fatal(err)
	}
}
