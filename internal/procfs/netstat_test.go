package procfs

import (
	"os"
	"testing"
)

func TestParseSNMP(t *testing.T) {
	text := `Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm OutSegs RetransSegs
Tcp: 1 1200 34
Udp: InDatagrams RcvbufErrors
Udp: 99 7
`
	s, err := ParseSNMP(text)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		proto, name string
		want        int64
	}{{"Tcp", "RetransSegs", 34}, {"Udp", "RcvbufErrors", 7}, {"Ip", "DefaultTTL", 64}} {
		if v, ok := s.Get(c.proto, c.name); !ok || v != c.want {
			t.Errorf("%s %s = %d (%v), want %d", c.proto, c.name, v, ok, c.want)
		}
	}
	for name, bad := range map[string]string{
		"odd lines":  "Tcp: A B\n",
		"mismatched": "Tcp: A B\nUdp: 1 2\n",
		"not number": "Tcp: A\nTcp: x\n",
	} {
		if _, err := ParseSNMP(bad); err == nil {
			t.Errorf("%s: parsed, want an error", name)
		}
	}
	if _, err := ReadSNMP(); err != nil && !os.IsNotExist(err) {
		t.Errorf("this machine's /proc/net/snmp: %v", err)
	}
}

func TestParseSoftnet(t *testing.T) {
	text := "0000a000 00000002 00000010 00000000\n0000b000 00000001 00000001 00000000\n"
	s, err := ParseSoftnet(text)
	if err != nil || s.Dropped != 3 || s.Squeezed != 17 {
		t.Fatalf("ParseSoftnet = %+v, %v; want dropped 3, squeezed 17", s, err)
	}
	if _, err := ParseSoftnet("00 zz 01\n"); err == nil {
		t.Error("a non-hexadecimal column parsed")
	}
	if _, err := ReadSoftnet(); err != nil && !os.IsNotExist(err) {
		t.Errorf("this machine's softnet_stat: %v", err)
	}
}
