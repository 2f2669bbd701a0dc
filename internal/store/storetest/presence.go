package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/store"
)

// testPresence: an agent whose row names a replica's presence lease stays
// online however old its time while the lease lives; a release by a
// replica the agent left leaves the newer hold alone; a released agent is
// silent from its release; an agent of an expired lease is marked offline;
// expired leases are dropped by prefix. (Times before every other test's,
// so the offline marks here touch only these agents.)
func testPresence(t *testing.T, st store.Store) {
	ctx := context.Background()
	const ttl = 15 * time.Second
	l1, l2 := "presence pt-r1", "presence pt-r2"
	renew := func(lease, holder string, now float64) {
		t.Helper()
		if l, err := st.HoldLease(ctx, lease, holder, at(now), ttl); err != nil || !l.Held {
			t.Fatalf("hold %s at %v: %+v %v", lease, now, l, err)
		}
	}
	set := func(lease string, now float64, want int, ps ...store.Presence) {
		t.Helper()
		if n, err := st.SetPresence(ctx, lease, ps, at(now)); err != nil || n != want {
			t.Fatalf("set presence %s at %v %+v: %d rows, %v; want %d", lease, now, ps, n, err, want)
		}
	}
	offline := func(since, now float64, want ...string) {
		t.Helper()
		off, err := st.MarkSilentOffline(ctx, at(since), at(now))
		if err != nil {
			t.Fatal(err)
		}
		got := uids(off)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("offline at %v (silent since %v): %v, want %v", now, since, got, want)
		}
	}
	for _, uid := range []string{"pr-1", "pr-2", "pr-3", "pr-4"} {
		beat(t, st, uid, "n-pr", at(-1000))
	}
	renew(l1, "pt-r1", -1000)
	renew(l2, "pt-r2", -1000)
	set(l1, -999, 3, store.Presence{PodUID: "pr-1", Held: true}, store.Presence{PodUID: "pr-2", Held: true},
		store.Presence{PodUID: "pr-3", Held: true}, store.Presence{PodUID: "nobody", Held: true})
	if g, _ := st.GetAgent(ctx, "pr-1"); !g.LastHeartbeat.Equal(at(-999)) {
		t.Errorf("held agent's time %v, want its hold's", g.LastHeartbeat)
	}
	// pr-3 moves to r2; r1's release of it afterwards changes nothing.
	set(l2, -998, 1, store.Presence{PodUID: "pr-3", Held: true})
	set(l1, -997, 0, store.Presence{PodUID: "pr-3"})
	renew(l1, "pt-r1", -990)
	renew(l2, "pt-r2", -990) // both alive until -975
	// pr-4 holds no session: silent. The held ones are present.
	offline(-990, -980, "pr-4")
	// r1's session of pr-2 ends at -979: silent from then.
	set(l1, -979, 1, store.Presence{PodUID: "pr-2"})
	if g, _ := st.GetAgent(ctx, "pr-2"); !g.LastHeartbeat.Equal(at(-979)) {
		t.Errorf("released agent's time %v, want its release's", g.LastHeartbeat)
	}
	renew(l1, "pt-r1", -975) // r2 is not renewed: expired at -975
	offline(-980, -970, "pr-3")
	offline(-978, -968, "pr-2")
	// A release as of the agent's last sign of life (its session went
	// silent): silent since then, never moved back.
	beat(t, st, "pr-4", "n-pr", at(-970))
	set(l1, -969, 1, store.Presence{PodUID: "pr-4", Held: true})
	set(l1, -968, 1, store.Presence{PodUID: "pr-4", At: at(-985.5)})
	if g, _ := st.GetAgent(ctx, "pr-4"); !g.LastHeartbeat.Equal(at(-969)) {
		t.Errorf("a release as of a time before the stored one moved it: %v", g.LastHeartbeat)
	}
	set(l1, -968, 1, store.Presence{PodUID: "pr-4", Held: true})
	set(l1, -966, 1, store.Presence{PodUID: "pr-4", At: at(-966.5)})
	if g, _ := st.GetAgent(ctx, "pr-4"); !g.LastHeartbeat.Equal(at(-967)) {
		t.Errorf("released as of -966.5: time %v, want -967 (rounded down)", g.LastHeartbeat)
	}
	offline(-966.9, -962, "pr-4")
	// pr-1 is still held by r1: present, its time 30 s old.
	offline(-968, -961)
	// A held agent that was marked offline is held again when it comes
	// back: its row still names the lease.
	beat(t, st, "pr-3", "n-pr", at(-960))
	set(l1, -960, 1, store.Presence{PodUID: "pr-3", Held: true})
	offline(-950, -949, "pr-1", "pr-3") // l1 expired at -960
	if n, err := st.DropExpiredLeases(ctx, "presence pt-", at(-949)); err != nil || n != 2 {
		t.Errorf("dropped %d expired leases, %v; want 2", n, err)
	}
	if n, err := st.DropExpiredLeases(ctx, "presence pt-", at(-949)); err != nil || n != 0 {
		t.Errorf("dropped %d again, %v; want 0", n, err)
	}
	renew(l1, "pt-r1", -948)
	if l, err := st.HoldLease(ctx, l1, "pt-r9", at(-947), ttl); err != nil || l.Held {
		t.Errorf("a dropped-then-renewed lease taken by another: %+v %v", l, err)
	}
	if n, err := st.DropExpiredLeases(ctx, "presence pt-", at(-947)); err != nil || n != 0 {
		t.Errorf("dropped %d leases alive, %v; want 0", n, err)
	}
	if _, err := st.DropExpiredLeases(ctx, "presence%", at(0)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a wildcard prefix: %v, want ErrInvalid", err)
	}
	if _, err := st.SetPresence(ctx, "", []store.Presence{{PodUID: "pr-1"}}, at(0)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("no lease: %v, want ErrInvalid", err)
	}
}
