package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// testClaimCreated checks the claim of tasks just created: only those
// whose source holds a live session and whose destination is online, the
// exclusive rule across the run and against tasks already running, at
// most limit per source, and nothing twice.
func testClaimCreated(t *testing.T, st store.Store) {
	ctx := context.Background()
	const lease = "presence cr-r1"
	if l, err := st.HoldLease(ctx, lease, "cr-r1", at(0), time.Minute); err != nil || !l.Held {
		t.Fatalf("hold %s: %+v %v", lease, l, err)
	}
	for _, a := range []struct{ uid, node string }{
		{"cr-a", "cr-1"}, {"cr-b", "cr-2"}, {"cr-c", "cr-3"}, {"cr-d", "cr-4"}, {"cr-poll", "cr-5"}, {"cr-e", "cr-6"},
	} {
		beat(t, st, a.uid, a.node, at(0))
	}
	held := []store.Presence{{PodUID: "cr-a", Held: true}, {PodUID: "cr-b", Held: true}, {PodUID: "cr-c", Held: true}, {PodUID: "cr-e", Held: true}}
	if _, err := st.SetPresence(ctx, lease, held, at(0)); err != nil {
		t.Fatal(err)
	}
	excl := func(src, dst string) store.Task {
		tk := mkTask(src, dst, "tcp")
		tk.Exclusive = true
		return tk
	}
	// Running already: an exclusive task on node cr-6 (cr-e → cr-d).
	busy := create(t, st, excl("cr-e", "cr-d"))[0]
	if got, err := st.ClaimCreated(ctx, []int64{busy.ID}, at(1), 10, time.Second); err != nil || len(got) != 1 {
		t.Fatalf("claim the busy node's task: %v %v", got, err)
	}
	ts := create(t, st,
		excl("cr-a", "cr-b"),              // 0: claimed
		excl("cr-c", "cr-b"),              // 1: node cr-2 taken by 0 in the same claim
		excl("cr-c", "cr-e"),              // 2: node cr-6 busy with the running task
		mkTask("cr-poll", "cr-a", "ping"), // 3: source holds no session
		mkTask("cr-a", "cr-c", "ping"),    // 4: claimed
		mkTask("cr-a", "cr-c", "ping"),    // 5: over the limit of 2 for cr-a
		mkTask("cr-c", "cr-gone", "ping"), // 6: destination unknown
	)
	ids := make([]int64, len(ts))
	for i, tk := range ts {
		ids[i] = tk.ID
	}
	got, err := st.ClaimCreated(ctx, ids, at(2), 2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ts[0].TaskID, ts[4].TaskID}
	var gotIDs []string
	for _, g := range got {
		gotIDs = append(gotIDs, g.TaskID)
		if g.State != store.TaskDispatched || g.DispatchedAt == nil || !g.DispatchedAt.Equal(at(2)) || g.Deadline == nil || !g.Deadline.Equal(at(2).Add(g.Timeout+5*time.Second)) {
			t.Errorf("claimed %s: state %s dispatched %v deadline %v (timeout %v)", g.TaskID, g.State, g.DispatchedAt, g.Deadline, g.Timeout)
		}
	}
	if !slices.Equal(gotIDs, want) {
		t.Fatalf("claimed %v, want %v (oldest first)", gotIDs, want)
	}
	// Again: nothing is claimed twice; what was left is still pending and
	// claimable by its source's own claim.
	if again, err := st.ClaimCreated(ctx, ids, at(3), 2, 5*time.Second); err != nil || len(again) != 1 || again[0].TaskID != ts[5].TaskID {
		t.Errorf("second claim of the same ids: %v %v; want only the task over the limit", again, err)
	}
	if own, err := st.ClaimTasks(ctx, "cr-poll", at(3), 10, time.Second); err != nil || len(own) != 1 || own[0].TaskID != ts[3].TaskID {
		t.Errorf("the polling source's own claim: %v %v", own, err)
	}
	// The lease expired: no source is held, nothing is claimed.
	late := create(t, st, mkTask("cr-b", "cr-a", "ping"))[0]
	if got, err := st.ClaimCreated(ctx, []int64{late.ID}, at(120), 2, time.Second); err != nil || len(got) != 0 {
		t.Errorf("claim after the presence lease expired: %v %v", got, err)
	}
	for _, c := range []struct {
		name  string
		ids   []int64
		limit int
		grace time.Duration
	}{
		{"limit 0", ids, 0, 0},
		{"negative grace", ids, 1, -time.Second},
		{"too many ids", make([]int64, 1001), 1, 0},
	} {
		if _, err := st.ClaimCreated(ctx, c.ids, at(4), c.limit, c.grace); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
}
