package main

import (
	"slices"
	"testing"
)

// TestModesRun: -only rr runs rr in all three modes, tcp and udp only in
// the unpinned and pinned ones, no flag everything with rr alone shared.
func TestModesRun(t *testing.T) {
	tests := []struct {
		only string
		want map[string][]string // mode → tests run
	}{
		{only: "", want: map[string][]string{"unpinned": {"tcp", "udp", "rr"}, "pinned": {"tcp", "udp", "rr"}, "shared": {"rr"}}},
		{only: "rr", want: map[string][]string{"unpinned": {"rr"}, "pinned": {"rr"}, "shared": {"rr"}}},
		{only: "tcp", want: map[string][]string{"unpinned": {"tcp"}, "pinned": {"tcp"}}},
		{only: "udp", want: map[string][]string{"unpinned": {"udp"}, "pinned": {"udp"}}},
	}
	for _, tt := range tests {
		got := map[string][]string{}
		for _, m := range modes {
			for _, test := range []string{"tcp", "udp", "rr"} {
				if m.runs(test, tt.only) {
					got[m.short] = append(got[m.short], test)
				}
			}
			if m.runsAny(tt.only) != (len(got[m.short]) > 0) {
				t.Errorf("-only %q, mode %s: runsAny disagrees with runs", tt.only, m.short)
			}
		}
		for m, want := range tt.want {
			if !slices.Equal(got[m], want) {
				t.Errorf("-only %q, mode %s: runs %v, want %v", tt.only, m, got[m], want)
			}
		}
		if len(got) != len(tt.want) {
			t.Errorf("-only %q: modes run %v, want %v", tt.only, got, tt.want)
		}
	}
}

func TestCommandPins(t *testing.T) {
	if c := command(t.Context(), -1, "sockperf", "server"); !slices.Equal(c.Args, []string{"sockperf", "server"}) {
		t.Errorf("unpinned: %v", c.Args)
	}
	if c := command(t.Context(), 0, "sockperf", "server"); !slices.Equal(c.Args, []string{"taskset", "-c", "0", "sockperf", "server"}) {
		t.Errorf("CPU 0: %v", c.Args)
	}
}
