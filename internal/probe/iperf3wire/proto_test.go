package iperf3wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseParams(t *testing.T) {
	cases := []struct {
		name, body string
		code       int32 // 0: accepted
		want       Params
	}{
		{"tcp defaults", `{"tcp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.12"}`,
			0, Params{TCP: true, Time: 10, Parallel: 1, Len: 131072, PacingTimer: 1000, ClientVer: "3.12"}},
		{"udp reverse 64-bit", `{"udp":true,"time":2,"parallel":2,"reverse":true,"len":1400,"bandwidth":1000000000,"udp_counters_64bit":1}`,
			0, Params{UDP: true, Time: 2, Parallel: 2, Reverse: true, Len: 1400, Bandwidth: 1e9, Counters64: true}},
		{"10G as a float", `{"tcp":true,"time":1,"bandwidth":1e10}`, 0, Params{TCP: true, Time: 1, Parallel: 1, Len: defaultTCPLen, Bandwidth: 1e10}},
		{"bidir", `{"tcp":true,"time":1,"bidirectional":true}`, 0, Params{TCP: true, Time: 1, Parallel: 1, Len: defaultTCPLen, Bidir: true}},
		{"bytes", `{"tcp":true,"time":0,"num":1048576}`, 0, Params{TCP: true, Parallel: 1, Len: defaultTCPLen, Bytes: 1 << 20}},
		{"blocks", `{"tcp":true,"time":0,"blockcount":7}`, 0, Params{TCP: true, Parallel: 1, Len: defaultTCPLen, Blocks: 7}},
		{"omit", `{"tcp":true,"time":1,"omit":2}`, 0, Params{TCP: true, Time: 1, Parallel: 1, Len: defaultTCPLen, Omit: 2}},
		{"socket options", `{"tcp":true,"time":1,"MSS":1000,"window":65536,"congestion":"reno","TOS":184,"get_server_output":1}`, 0,
			Params{TCP: true, Time: 1, Parallel: 1, Len: defaultTCPLen, MSS: 1000, Window: 65536, Congestion: "reno", TOS: 184, ServerOutput: true}},
		{"reverse and bidir", `{"tcp":true,"time":1,"reverse":true,"bidirectional":true}`, errReverseBidir, Params{}},
		{"no end", `{"tcp":true,"time":0}`, errUnsupported, Params{}},
		{"omit too long", `{"tcp":true,"time":1,"omit":61}`, errOmit, Params{}},
		{"bad congestion name", `{"tcp":true,"time":1,"congestion":"../x"}`, errSetCongestion, Params{}},
		{"TOS past a byte", `{"tcp":true,"time":1,"TOS":256}`, errBadTOS, Params{}},
		{"unknown key", `{"tcp":true,"time":1,"warp_speed":9}`, errUnsupported, Params{}},
		{"sctp", `{"sctp":true,"time":1}`, errProtocol, Params{}},
		{"no protocol", `{"time":1}`, errProtocol, Params{}},
		{"too long", `{"tcp":true,"time":86401}`, errDuration, Params{}},
		{"too many streams", `{"tcp":true,"time":1,"parallel":129}`, errNumStreams, Params{}},
		{"udp block too small", `{"udp":true,"time":1,"len":8}`, errUDPBlock, Params{}},
		{"tcp block too large", `{"tcp":true,"time":1,"len":2000000}`, errBlockSize, Params{}},
		{"negative", `{"tcp":true,"time":-1}`, errUnsupported, Params{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body map[string]json.RawMessage
			if err := json.Unmarshal([]byte(c.body), &body); err != nil {
				t.Fatal(err)
			}
			got, err := ParseParams(body)
			if c.code == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got != c.want {
					t.Fatalf("got %+v, want %+v", got, c.want)
				}
				return
			}
			if code := refusalCode(err); code != c.code {
				t.Fatalf("got %v (code %d), want refusal code %d", err, code, c.code)
			}
		})
	}
}

// refusalCode returns the iperf3 error code a refusal sends, 0 for none.
func refusalCode(err error) int32 {
	var rf *refusal
	var sr *sysRefusal
	switch {
	case errors.As(err, &sr):
		return sr.code
	case errors.As(err, &rf):
		return rf.code
	}
	return 0
}

func TestParseParamsNamesTheOption(t *testing.T) {
	_, err := ParseParams(map[string]json.RawMessage{"tcp": []byte("true"), "time": []byte("1"), "fqrate": []byte("1000"), "dont_fragment": []byte("1")})
	if err == nil || !strings.Contains(err.Error(), "--fq-rate") || !strings.Contains(err.Error(), "--dont-fragment") {
		t.Fatalf("want both options named, got %v", err)
	}
	if code := refusalCode(err); code != errSetDontFrag {
		t.Errorf("code %d, want %d (the first option's, by name)", code, errSetDontFrag)
	}
}

func TestUDPRecvAccounting(t *testing.T) {
	u := &udpRecv{}
	base := time.Unix(1_700_000_000, 0)
	pkt := make([]byte, 100)
	// 1, 2, 4 (3 lost), 3 (late: takes the loss back), 6 (5 lost)
	for i, seq := range []uint64{1, 2, 4, 3, 6} {
		sent := base.Add(time.Duration(i) * time.Millisecond)
		putUDPHeader(pkt, sent, seq, false)
		u.add(pkt, sent.Add(time.Duration(1+i%2)*time.Millisecond)) // transit alternates 1 ms, 2 ms
	}
	s := u.snapshot()
	if s.bytes != 500 || s.highest != 6 || s.lost != 1 || s.outOfOrder != 1 {
		t.Fatalf("bytes %d highest %d lost %d out of order %d; want 500 6 1 1", s.bytes, s.highest, s.lost, s.outOfOrder)
	}
	if s.jitter <= 0 || s.jitter > 0.001 {
		t.Fatalf("jitter %v s, want between 0 and 1 ms", s.jitter)
	}
	u64 := &udpRecv{counters64: true}
	putUDPHeader(pkt, base, 1<<40, true)
	u64.add(pkt, base)
	if got := u64.snapshot().highest; got != 1<<40 {
		t.Fatalf("64-bit counter read as %d", got)
	}
}

func TestCookie(t *testing.T) {
	c := NewCookie()
	if !validCookie(c[:]) {
		t.Fatalf("cookie %q is not valid", c)
	}
	if NewCookie() == c {
		t.Fatal("two cookies alike")
	}
	if IsCookieStart([]byte("CNPC")) {
		t.Fatal("cnperf's preface taken for a cookie")
	}
}
