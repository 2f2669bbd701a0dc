package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParseByteSize(t *testing.T) {
	cases := []struct {
		in      string
		want    int
		wantErr string
	}{
		{"1400", 1400, ""},
		{"0", 0, ""},
		{"128K", 128 << 10, ""},
		{"128k", 128 << 10, ""},
		{"4M", 4 << 20, ""},
		{"1g", 1 << 30, ""},
		{"", 0, "want a byte count"},
		{"K", 0, "want a byte count"},
		{"1.5K", 0, "want a byte count"},
		{"-1", 0, "want a byte count"},
		{"12KB", 0, "want a byte count"},
		{"3G", 0, "too large"},
	}
	for _, tc := range cases {
		got, err := parseByteSize(tc.in)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: err %v, want one saying %q", tc.in, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%q: %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestProbeSizeSuffix runs `cnperf probe udp -l 1K` against a responder:
// the datagrams are 1,024 bytes, as iperf3 -l 1K sends them; a bad size
// fails with the flag named.
func TestProbeSizeSuffix(t *testing.T) {
	addr, _ := startResponder(t)
	code, out, errs := cnperf(t, 20*time.Second, "probe", "udp", "--to", addr, "-l", "1K", "-b", "1M", "-t", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var res struct {
		Bytes   struct{ Sender int64 } `json:"bytes"`
		Packets struct{ Sent int64 }   `json:"packets"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	if res.Packets.Sent == 0 || res.Bytes.Sender != 1024*res.Packets.Sent {
		t.Errorf("%d bytes in %d datagrams, want 1024 each", res.Bytes.Sender, res.Packets.Sent)
	}
	code, _, errs = cnperf(t, 20*time.Second, "probe", "udp", "--to", addr, "-l", "1.5K", "-t", "1")
	if code == 0 || !strings.Contains(errs, "size") || !strings.Contains(errs, "want a byte count") {
		t.Errorf("-l 1.5K: exit %d, stderr %q; want a refusal naming the flag", code, errs)
	}
}
