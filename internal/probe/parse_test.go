package probe

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseDSCP(t *testing.T) {
	tests := []struct {
		in      string
		want    int
		wantErr string
	}{
		{"EF", 46, ""}, {"ef", 46, ""}, {"AF41", 34, ""}, {"CS1", 8, ""}, {"46", 46, ""}, {"0x2e", 46, ""},
		{"0", 0, ""}, {"63", 63, ""}, {"64", 0, "must be 0-63"}, {"-1", 0, "must be 0-63"},
		{"GOLD", 0, "not a known name"}, {"", 0, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDSCP(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseDSCP(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseDSCP(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
	if DSCPName(46) != "EF" || DSCPName(34) != "AF41" || DSCPName(8) != "CS1" || DSCPName(0) != "BE" || DSCPName(7) != "7" {
		t.Errorf("DSCPName: %s %s %s %s %s", DSCPName(46), DSCPName(34), DSCPName(8), DSCPName(0), DSCPName(7))
	}
}

func TestParseTOS(t *testing.T) {
	for in, want := range map[string]int{"0x10": 16, "0x08": 8, "16": 16, "0xb8": 184} {
		if got, err := ParseTOS(in); err != nil || got != want {
			t.Errorf("ParseTOS(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"0x100", "-1", "high", ""} {
		if _, err := ParseTOS(bad); err == nil {
			t.Errorf("ParseTOS(%q) accepted", bad)
		}
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0", 0, true}, {"100", 100, true}, {"10k", 10000, true}, {"10M", 10_000_000, true},
		{"1.5G", 1_500_000_000, true}, {"2g", 2_000_000_000, true}, {"10Mbps", 10_000_000, true},
		{"-1M", 0, false}, {"fast", 0, false}, {"", 0, false}, {"M", 0, false}, {"NaN", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestSpecValidateCommon(t *testing.T) {
	tos := 300
	tests := []struct {
		name     string
		spec     Spec
		needPort bool
		wantErr  string
	}{
		{"ok", Spec{Target: "127.0.0.1:5201", Duration: Duration(time.Second)}, true, ""},
		{"ok v6", Spec{Target: "[::1]:5201"}, true, ""},
		{"no target", Spec{}, true, "target: missing"},
		{"no port", Spec{Target: "127.0.0.1"}, true, "want HOST:PORT"},
		{"bad port", Spec{Target: "h:99999"}, true, "port must be"},
		{"host only ok", Spec{Target: "example"}, false, ""},
		{"negative duration", Spec{Target: "h:1", Duration: Duration(-time.Second)}, true, "must not be negative"},
		{"negative count", Spec{Target: "h:1", Count: -3}, true, "count -3"},
		{"tos out of range", Spec{Target: "h:1", TOS: &tos}, true, "tos 300"},
		{"bad source", Spec{Target: "h:1", Source: "nowhere"}, true, "source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.ValidateCommon(tt.needPort)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestSpecJSONRoundTrip(t *testing.T) {
	rate := uint64(0)
	tos := 0xb8
	in := Spec{Kind: KindUDP, Target: "10.0.0.1:5201", Duration: Duration(1500 * time.Millisecond), RateBps: &rate, TOS: &tos}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"duration":"1.5s"`) || !strings.Contains(string(b), `"rate_bps":0`) {
		t.Fatalf("json = %s", b)
	}
	var out Spec
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Duration != in.Duration || out.RateBps == nil || *out.RateBps != 0 || out.DSCP() != 46 {
		t.Fatalf("round trip = %+v", out)
	}
	var secs Spec
	if err := json.Unmarshal([]byte(`{"duration":2}`), &secs); err != nil || secs.Duration.D() != 2*time.Second {
		t.Fatalf("numeric duration: %v %v", secs.Duration.D(), err)
	}
	if err := json.Unmarshal([]byte(`{"duration":"soon"}`), &secs); err == nil {
		t.Fatal("bad duration accepted")
	}
}

func TestMetricsFlattensDottedNames(t *testing.T) {
	r := &Result{Kind: KindUDP, DSCP: 46, ThroughputBps: &SenderReceiver{Sender: 2e9, Receiver: 1.9e9},
		LossPct: Float(0), RTTms: &Summary{P99: 0.5}, DSCPSurvived: Bool(true),
		Intervals: []Interval{{StartS: 0, EndS: 1, ThroughputBps: 1}}}
	m := Metrics(r)
	want := map[string]float64{"throughput_bps.receiver": 1.9e9, "throughput_bps.sender": 2e9, "loss_pct": 0,
		"rtt_ms.p99": 0.5, "dscp": 46, "dscp_survived": 1}
	for k, v := range want {
		got, ok := m[k]
		if !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for k := range m {
		if strings.HasPrefix(k, "intervals") {
			t.Errorf("series %s flattened", k)
		}
	}
	if _, ok := m["jitter_ms"]; ok {
		t.Error("unmeasured jitter_ms present")
	}
}
