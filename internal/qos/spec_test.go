package qos

import (
	"errors"
	"testing"

	"github.com/cnperf/cnperf/internal/qosspec"
)

func TestSpecBuild(t *testing.T) {
	cases := []struct {
		name      string
		spec      Spec
		wantKind  string
		wantField string
	}{
		{"pfifo_fast", Spec{Setup: "pfifo_fast"}, "pfifo_fast", ""},
		{"htb", Spec{Setup: "htb-priority", RateBps: 10_000_000, DSCP: []int{46, 10}, Leaf: &qosspec.QueueLimit{Packets: 100}}, "htb-priority", ""},
		{"tbf", Spec{Setup: "tbf", RateBps: 10_000_000, BurstBytes: 16000}, "tbf", ""},
		{"missing", Spec{}, "", "setup"},
		{"unknown", Spec{Setup: "cake"}, "", "setup"},
		{"dscp 64", Spec{Setup: "htb-priority", RateBps: 10_000_000, DSCP: []int{64}}, "", "dscp"},
		{"no dscp", Spec{Setup: "htb-priority", RateBps: 10_000_000}, "", "dscp"},
		{"high rate above rate", Spec{Setup: "htb-priority", RateBps: 10_000_000, HighRateBps: 20_000_000, DSCP: []int{46}}, "", "high_rate_bps"},
		{"tbf rate 0", Spec{Setup: "tbf", BurstBytes: 16000}, "", "rate_bps"},
		{"tbf no burst", Spec{Setup: "tbf", RateBps: 10_000_000}, "", "burst_bytes"},
		{"rate on pfifo_fast", Spec{Setup: "pfifo_fast", RateBps: 1}, "", "rate_bps"},
		{"burst on htb", Spec{Setup: "htb-priority", RateBps: 10_000_000, DSCP: []int{46}, BurstBytes: 1}, "", "burst_bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Build(c.spec)
			if c.wantField != "" {
				var ve *ValidationError
				if !errors.As(err, &ve) || ve.Field != c.wantField {
					t.Fatalf("err %v, want a ValidationError on %s", err, c.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind() != c.wantKind {
				t.Errorf("kind %s, want %s", s.Kind(), c.wantKind)
			}
		})
	}
}
