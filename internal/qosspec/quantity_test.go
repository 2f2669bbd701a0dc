package qosspec

import (
	"math"
	"strings"
	"testing"
)

func TestParseQuantity(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		err  string
	}{
		{"10M", 10e6, ""},
		{"1G", 1e9, ""},
		{"1.5G", 1.5e9, ""},
		{"100k", 100e3, ""},
		{"32Ki", 32768, ""},
		{"4Mi", 4 << 20, ""},
		{"1e6", 1e6, ""},
		{"500m", 0.5, ""},
		{"12345", 12345, ""},
		{"10K", 0, `writes kilo as "k"`},
		{"-1M", 0, "negative"},
		{"ten", 0, "want a number"},
		{"", 0, "empty"},
		{"1_000", 0, "want a number"},
	} {
		got, err := ParseQuantity(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || math.Abs(got-c.want) > 1e-9*c.want {
			t.Errorf("%q: %v %v, want %v", c.in, got, err, c.want)
		}
	}
	if _, err := ParseBandwidth("0"); err == nil || !strings.Contains(err.Error(), "rate 0") {
		t.Errorf("bandwidth 0: %v", err)
	}
	if v, err := ParseBandwidth("10M"); err != nil || v != 10e6 {
		t.Errorf("bandwidth 10M: %v %v", v, err)
	}
}

// TestParseBandwidthAnnotations: the quantities pods are annotated with.
func TestParseBandwidthAnnotations(t *testing.T) {
	cases := map[string]uint64{"10M": 10e6, "1G": 1e9, "500k": 500e3, "20Mi": 20 * 1024 * 1024}
	for in, want := range cases {
		got, err := ParseBandwidth(in)
		if err != nil || got != want {
			t.Errorf("ParseBandwidth(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}
