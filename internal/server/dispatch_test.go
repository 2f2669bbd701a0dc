package server

import (
	"testing"

	"github.com/cnperf/cnperf/internal/api"
)

// TestWakeUpsOfAgentsHeldElsewhere: with other replicas (share set), a
// wake-up, a pending hint or a stop for an agent whose session or long
// poll is not here leaves this replica not knowing it, so it keeps no
// mail or cancellation for it (another replica's offers and stops are
// applied only where the agent is known). An agent polling here is woken
// and gets its stop.
func TestWakeUpsOfAgentsHeldElsewhere(t *testing.T) {
	const far, near = "uid-far", "uid-near"
	for _, tc := range []struct {
		name string
		do   func(d *dispatcher, uid string)
	}{
		{"notify", func(d *dispatcher, uid string) { d.notify(uid) }},
		{"pending hint from another replica", func(d *dispatcher, uid string) { d.addPendingLocal(uid) }},
		{"pending hints woken", func(d *dispatcher, uid string) { d.addPendingLocal(uid); d.wakePendingLocal() }},
		{"stop", func(d *dispatcher, uid string) { d.stopTaskLocal(uid, "task-1") }},
		{"server request from another replica", func(d *dispatcher, uid string) {
			d.serveLocal(uid, api.ServeRequest{TaskID: "task-1", Tool: api.TypeIperf3})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDispatcher()
			d.share = func(...clusterMsg) {}
			wake := d.ch(near) // near's long poll waits here
			tc.do(d, far)
			if d.knows(far) {
				t.Errorf("after %s of an agent held elsewhere, this replica knows it", tc.name)
			}
			if _, serve, cancel := d.mail(far); len(serve) > 0 || len(cancel) > 0 {
				t.Errorf("after %s, this replica keeps %d server requests and %d stops for an agent held elsewhere", tc.name, len(serve), len(cancel))
			}
			tc.do(d, near)
			select {
			case <-wake:
			default:
				t.Errorf("%s of the agent polling here did not wake its poll", tc.name)
			}
		})
	}
	d := newDispatcher()
	d.share = func(...clusterMsg) {}
	d.ch(near)
	d.stopTaskLocal(near, "task-1")
	if got := d.takeCancel(near); len(got) != 1 || got[0] != "task-1" {
		t.Errorf("stop of the agent polling here: cancellations %v, want [task-1]", got)
	}
}
