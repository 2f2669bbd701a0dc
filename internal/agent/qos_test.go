package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/nettest"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/engine"
	"github.com/cnperf/cnperf/internal/probe/udp"
	"github.com/cnperf/cnperf/internal/qos"
)

// Addresses of the QoS test's veth: the agent's end in the test's own
// namespace, the far end in a namespace the test makes.
var (
	qosAgentIP = netip.MustParseAddr("198.19.251.1")
	qosFarIP   = netip.MustParseAddr("198.19.251.2")
)

// qosLink makes namespace "aq<hex>" and a veth "aq<hex>" whose near end
// (qosAgentIP/30) stays in the test's namespace and whose far end
// (qosFarIP/30) goes into the new one. Both go in t.Cleanup.
func qosLink(t *testing.T) (*nettest.NS, string) {
	t.Helper()
	nettest.Require(t)
	var b [3]byte
	_, _ = rand.Read(b[:])
	name := "aq" + hex.EncodeToString(b[:])
	far, err := nettest.NewNS(name)
	if err != nil {
		t.Fatalf("make namespace: %v", err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				t.Errorf("cleanup: delete %s: %v", name, err)
			}
		}
		if err := nettest.Delete(far); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	farNS, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer farNS.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(farNS)}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("add veth %s: %v", name, err)
	}
	near, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.AddrAdd(near, &netlink.Addr{IPNet: &net.IPNet{IP: qosAgentIP.AsSlice(), Mask: net.CIDRMask(30, 32)}}); err != nil {
		t.Fatalf("address %s: %v", name, err)
	}
	if err := netlink.LinkSetUp(near); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(farNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, l := range []string{"lo", "eth0"} {
		link, err := h.LinkByName(l)
		if err != nil {
			t.Fatal(err)
		}
		if l == "eth0" {
			if err := h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: qosFarIP.AsSlice(), Mask: net.CIDRMask(30, 32)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
	}
	return far, name
}

// TestAgentAppliesQoS: an agent whose pod IP sits on a veth gets a udp
// probe with a tbf set-up: the tbf is on the veth while the probe runs,
// the receiver sees about the tbf rate, the result notes the set-up, and
// the veth is back to its default qdisc afterwards.
func TestAgentAppliesQoS(t *testing.T) {
	far, link := qosLink(t)
	e := newEnv(t)
	e.agent("qsrc", qosAgentIP.String())

	// The destination: a udp responder listening in the far namespace,
	// announced to the server as an agent.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp := engine.NewResponder(testLogger(t), &udp.Handler{})
	if err := far.Do(func() error { return resp.Listen(ctx, net.JoinHostPort(qosFarIP.String(), "0")) }); err != nil {
		t.Fatalf("responder in %s: %v", far.Name, err)
	}
	go func() { _ = resp.Serve(ctx) }()
	t.Cleanup(func() { _ = resp.Close() })
	acl, err := client.New(e.url, agentTok, client.WithHTTPClient(&http.Client{Timeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acl.Heartbeat(ctx, api.Heartbeat{PodName: "qdst", PodUID: "uid-qdst", PodIP: qosFarIP.String(),
		NodeName: "node-qdst", ResponderAddr: resp.Addr().String(), BootID: "qdst"}); err != nil {
		t.Fatal(err)
	}

	const rate = 20_000_000
	send := uint64(100_000_000)
	run, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{
		Src: "qsrc", Dst: "qdst",
		Spec: &probe.Spec{Kind: "udp", Duration: probe.Duration(time.Second), RateBps: &send, Size: 1400},
		QoS:  &qos.Spec{Setup: qos.SpecTBF, RateBps: rate, BurstBytes: 16000},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	id := run.Tasks[0].TaskID
	if q := run.Tasks[0].QoS; q == nil || q.Setup != "tbf" || q.RateBps != rate {
		t.Errorf("task answered with qos %+v", q)
	}

	// Watch the veth's root qdisc while the task runs.
	target := qos.Target{Link: link}
	seen := false
	deadline := time.Now().Add(25 * time.Second)
	var got api.TaskV2
	for {
		if st, err := qos.Show(target); err == nil {
			if root, ok := st.Root(); ok && root.Kind == "tbf" {
				seen = true
			}
		}
		got, err = e.user.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if api.TerminalState(got.State) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got.State != api.StateSucceeded {
		t.Fatalf("task: state %s reason %q", got.State, got.Reason)
	}
	if !seen {
		t.Error("no tbf at the root of the agent's veth while the task ran")
	}
	st, err := qos.Show(target)
	if err != nil {
		t.Fatal(err)
	}
	if root, ok := st.Root(); ok && root.Kind == "tbf" {
		t.Errorf("tbf still on %s after the task", link)
	}
	var res probe.Result
	if err := json.Unmarshal(got.Result, &res); err != nil {
		t.Fatalf("result: %v", err)
	}
	if res.ThroughputBps == nil {
		t.Fatalf("udp result without throughput: %s", got.Result)
	}
	rx := res.ThroughputBps.Receiver
	t.Logf("tbf %d bit/s, sent at %d bit/s: receiver %.0f bit/s, sender %.0f bit/s", rate, send, rx, res.ThroughputBps.Sender)
	// Generous bounds: the bucket lets a burst through at the start, and a
	// loaded machine may send below the asked rate.
	if rx > 2*rate || rx < rate/4 {
		t.Errorf("receiver throughput %.0f bit/s, want about the tbf rate %d bit/s", rx, rate)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "qos: applied tbf rate 20000000 bit/s burst 16000 B on "+link) {
		t.Errorf("result notes %q do not say what was applied", res.Notes)
	}

	// Cancelled while it runs: the set-up goes too.
	run, err = e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{
		Src: "qsrc", Dst: "qdst",
		Spec: &probe.Spec{Kind: "udp", Duration: probe.Duration(10 * time.Second), RateBps: &send, Size: 1400},
		QoS:  &qos.Spec{Setup: qos.SpecTBF, RateBps: rate, BurstBytes: 16000},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	id = run.Tasks[0].TaskID
	e.waitRunning(id, 10*time.Second)
	for !rootIs(t, target, "tbf") {
		if time.Now().After(deadline) {
			t.Fatal("no tbf on the veth while the second task ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := e.user.CancelTask(ctx, id, "test"); err != nil {
		t.Fatal(err)
	}
	for rootIs(t, target, "tbf") {
		if time.Now().After(deadline) {
			t.Fatal("tbf still on the veth after the task was cancelled")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func rootIs(t *testing.T, target qos.Target, kind string) bool {
	t.Helper()
	st, err := qos.Show(target)
	if err != nil {
		t.Fatal(err)
	}
	root, ok := st.Root()
	return ok && root.Kind == kind
}

// TestRunRefusesBadQoS: a bad set-up is refused at create time with a 400
// naming the field, and no task is stored.
func TestRunRefusesBadQoS(t *testing.T) {
	e := newEnv(t)
	e.agent("qa", "127.0.0.2")
	e.agent("qb", "127.0.0.3")
	ctx := context.Background()
	cases := []struct {
		name  string
		qos   qos.Spec
		field string
	}{
		{"unknown set-up", qos.Spec{Setup: "cake"}, "tasks[0].qos.setup"},
		{"dscp out of range", qos.Spec{Setup: "htb-priority", RateBps: 10_000_000, DSCP: []int{46, 64}}, "tasks[0].qos.dscp"},
		{"rate 0", qos.Spec{Setup: "tbf", BurstBytes: 16000}, "tasks[0].qos.rate_bps"},
		{"field of another set-up", qos.Spec{Setup: "tbf", RateBps: 10_000_000, BurstBytes: 16000, DSCP: []int{46}}, "tasks[0].qos.dscp"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := c.qos
			_, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{
				Src: "qa", Dst: "qb", Spec: &probe.Spec{Kind: "rr", Count: 10}, QoS: &q,
			}}})
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field != c.field {
				t.Fatalf("got %v (%#v), want 400 naming %s", err, ae, c.field)
			}
		})
	}
	page, err := e.user.ListTasks(ctx, client.TaskQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if page.Total != 0 {
		t.Errorf("%d tasks stored after refused runs", page.Total)
	}
}

// TestAgentHoldsQoS: a qos-hold task's set-up is in place by the time the
// task runs, stays until the task is cancelled (or its duration passes,
// then the task succeeds), and is gone afterwards; a host-network agent
// holds it on the node's interface of its route to the destination; a
// hold without a set-up or a duration is refused at create time.
func TestAgentHoldsQoS(t *testing.T) {
	_, link := qosLink(t)
	e := newEnv(t)
	e.agent("hsrc", qosAgentIP.String())
	e.agentIn("hnode", "127.0.0.1", true)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	acl, err := client.New(e.url, agentTok, client.WithHTTPClient(&http.Client{Timeout: 5 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acl.Heartbeat(ctx, api.Heartbeat{PodName: "hdst", PodUID: "uid-hdst", PodIP: qosFarIP.String(),
		NodeName: "node-hdst", ResponderAddr: net.JoinHostPort(qosFarIP.String(), "5201"), BootID: "hdst"}); err != nil {
		t.Fatal(err)
	}
	htb := &qos.Spec{Setup: qos.SpecHTBPriority, RateBps: 100_000_000, DSCP: []int{46}}
	target := qos.Target{Link: link}
	hold := func(src string, d time.Duration) string {
		t.Helper()
		run, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{{Src: src, Dst: "hdst", Type: api.TypeQoSHold,
			Spec: &probe.Spec{Duration: probe.Duration(d)}, QoS: htb}}})
		if err != nil {
			t.Fatal(err)
		}
		return run.Tasks[0].TaskID
	}
	waitFinal := func(id string) api.TaskV2 {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got, err := e.user.GetTask(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if api.TerminalState(got.State) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("task %s still %s after 20s", id, got.State)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, src := range []string{"hsrc", "hnode"} {
		// Running means held: the tree is there the moment the task runs.
		id := hold(src, time.Minute)
		e.waitRunning(id, 10*time.Second)
		if !rootIs(t, target, "htb") {
			t.Fatalf("%s: the hold runs but %s has no htb at its root", src, link)
		}
		if _, err := e.user.CancelTask(ctx, id, "phase done"); err != nil {
			t.Fatal(err)
		}
		if got := waitFinal(id); got.State != api.StateCancelled {
			t.Errorf("%s: cancelled hold ended %s (%s)", src, got.State, got.Reason)
		}
		// The agent hears of the cancellation with its next heartbeat or
		// fetch (about a second), removes the tree, and only then
		// acknowledges: once the task shows stopped_at, the tree is gone.
		t0 := time.Now()
		for {
			got, err := e.user.GetTask(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.StoppedAt != nil {
				if rootIs(t, target, "htb") {
					t.Errorf("%s: the agent acknowledged the stop (%q) with htb still on %s", src, got.StopReason, link)
				}
				if got.State != api.StateCancelled || got.Reason != "phase done" || got.StopReason != "cancelled by the server" {
					t.Errorf("%s: acknowledged hold %s %q, stop reason %q", src, got.State, got.Reason, got.StopReason)
				}
				break
			}
			if time.Since(t0) > 10*time.Second {
				t.Fatalf("%s: no acknowledgement 10s after the hold was cancelled (htb still there: %v)", src, rootIs(t, target, "htb"))
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("%s: removal acknowledged %v after the cancel", src, time.Since(t0).Round(time.Millisecond))
	}
	// A node's interface with a root qdisc of its own is left alone.
	if err := qos.Apply(ctx, target, qos.TBF{Rate: 50_000_000, BurstBytes: 32000}); err != nil {
		t.Fatal(err)
	}
	got := waitFinal(hold("hnode", time.Minute))
	if got.State != api.StateFailed || !strings.Contains(got.Reason, "already has a root qdisc of its own (tbf") || !rootIs(t, target, "tbf") {
		t.Errorf("hold over a node's own qdisc: %s %q, tbf kept %v", got.State, got.Reason, rootIs(t, target, "tbf"))
	}
	if err := qos.Remove(target, qos.TBF{Rate: 50_000_000, BurstBytes: 32000}); err != nil {
		t.Fatal(err)
	}
	// Its duration bounds it on the agent: it ends by itself, succeeded.
	t0 := time.Now()
	got = waitFinal(hold("hsrc", 500*time.Millisecond))
	var res probe.Result
	_ = json.Unmarshal(got.Result, &res)
	if got.State != api.StateSucceeded || rootIs(t, target, "htb") || !strings.Contains(strings.Join(res.Notes, "\n"), "qos: held for") {
		t.Errorf("hold of 500ms: %s %q, notes %q, htb left %v", got.State, got.Reason, res.Notes, rootIs(t, target, "htb"))
	}
	t.Logf("a 500 ms hold ended by itself %v after it was created", time.Since(t0).Round(time.Millisecond))
	// A host-network agent still refuses a probe task's set-up.
	rr := api.RunTask{Src: "hnode", Dst: "hdst", Spec: &probe.Spec{Kind: "rr", Count: 1}, QoS: htb}
	run, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{rr}})
	if err != nil {
		t.Fatal(err)
	}
	if got := waitFinal(run.Tasks[0].TaskID); got.State != api.StateFailed || !strings.Contains(got.Reason, "host network") {
		t.Errorf("probe task with qos on a host-network agent: %s %q", got.State, got.Reason)
	}
	for _, c := range []struct {
		task  api.RunTask
		field string
	}{
		{api.RunTask{Src: "hsrc", Dst: "hdst", Type: api.TypeQoSHold, Spec: &probe.Spec{Duration: probe.Duration(time.Second)}}, "tasks[0].qos"},
		{api.RunTask{Src: "hsrc", Dst: "hdst", Type: api.TypeQoSHold, QoS: htb}, "tasks[0].spec.duration"},
		{api.RunTask{Src: "hsrc", Dst: "hdst", Type: api.TypeQoSHold, QoS: htb, Spec: &probe.Spec{Kind: "udp", Duration: probe.Duration(time.Second)}}, "tasks[0].spec"},
	} {
		_, err := e.user.CreateRun(ctx, api.RunCreate{Tasks: []api.RunTask{c.task}})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Field != c.field {
			t.Errorf("%+v: got %v, want 400 naming %s", c.task, err, c.field)
		}
	}
}

// TestVXLANInheritTakesNoQoSSlot: a host agent holds qos-priority's
// vxlan-inherit and the phase's node qdisc at once, so the tos change
// must not wait for the agent's one qdisc slot (it did, and the hold
// ran out before its phase); every qdisc set-up still does.
func TestVXLANInheritTakesNoQoSSlot(t *testing.T) {
	for _, s := range qos.SpecSetups {
		if got, want := usesQoSSlot(s), s != qos.SpecVXLANInherit; got != want {
			t.Errorf("%s: takes the qos slot %v, want %v", s, got, want)
		}
	}
}
