package external

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseParam(t *testing.T) {
	tests := []struct {
		name, tool, param string
		want              []string // nil with wantErr
		wantErr           string
	}{
		{"seed ping", "ping", "-c 5", []string{"-c", "5"}, ""},
		{"seed iperf", "iperf", "-i 1 -f M", []string{"-i", "1", "-f", "M"}, ""},
		{"seed qos iperf", "iperf", "-u -b 100M -t 10 -i 1 -S 0x10", []string{"-u", "-b", "100M", "-t", "10", "-i", "1", "-S", "16"}, ""},
		{"iperf3 udp", "iperf3", "-u -b 1G -l 1400 -t 5 -R -P 4", []string{"-u", "-b", "1G", "-l", "1400", "-t", "5", "-R", "-P", "4"}, ""},
		{"iperf3 long=value", "iperf3", "--time=3 --dscp EF", []string{"--time", "3", "--dscp", "46"}, ""},
		{"tabs and spaces", "traceroute", "\t-I  -q 2 ", []string{"-I", "-q", "2"}, ""},
		{"empty", "ping", "", []string{}, ""},

		{"semicolon", "ping", "-c 5; rm -rf /", nil, "metacharacter ';'"},
		{"pipe", "iperf3", "-t 5 | nc x", nil, "metacharacter '|'"},
		{"and", "ping", "-c 1 && reboot", nil, "metacharacter '&'"},
		{"dollar", "ping", "-c $(id)", nil, "metacharacter '$'"},
		{"backtick", "ping", "-c `id`", nil, "metacharacter '`'"},
		{"redirect", "iperf", "-t 5 > /tmp/x", nil, "metacharacter '>'"},
		{"newline", "ping", "-c 5\n-f", nil, "metacharacter '\\n'"},
		{"quote", "ping", "-p 'ff'", nil, "metacharacter '\\''"},
		{"unicode", "ping", "-c ５", nil, "character"},

		{"unknown flag", "iperf3", "-t 5 --evil", nil, "flag --evil not allowed"},
		{"unknown short", "ping", "-X", nil, "flag -X not allowed"},
		{"joined value", "ping", "-c5", nil, "write each flag and each value apart"},
		{"missing value", "iperf3", "-t", nil, "-t needs a value"},
		{"bad int", "ping", "-c many", nil, "not an integer"},
		{"out of range", "iperf3", "-P 1000", nil, "out of range"},
		{"negative time", "iperf", "-t -5", nil, "out of range"},
		{"bad rate", "iperf3", "-b fast", nil, "not a rate"},
		{"rate with burst", "iperf3", "-b 10M/100", nil, "character '/'"},
		{"bad tos", "iperf", "-S 0x100", nil, "0-255"},
		{"bad dscp", "iperf3", "--dscp XX", nil, "dscp"},
		{"value on switch", "iperf3", "--udp=1", nil, "takes no value"},

		{"iperf3 client", "iperf3", "-c 10.0.0.1", nil, "destination comes from the task"},
		{"iperf3 port", "iperf3", "-p 80", nil, "port comes from the task"},
		{"iperf3 server", "iperf3", "-s", nil, "server mode"},
		{"iperf3 logfile", "iperf3", "--logfile x", nil, "files"},
		{"iperf3 bind", "iperf3", "-B 1.2.3.4", nil, "source address"},
		{"iperf2 client", "iperf", "--client 10.0.0.1", nil, "destination"},
		{"iperf2 output", "iperf", "-o out.txt", nil, "files"},
		{"iperf2 dualtest", "iperf", "-d", nil, "connect back"},
		{"positional host", "ping", "-c 1 8.8.8.8", nil, "unexpected argument \"8.8.8.8\""},
		{"traceroute host", "traceroute", "10.0.0.1", nil, "destination comes from the task"},
		{"traceroute packetlen", "traceroute", "-n 1500", nil, "unexpected argument"},
		{"ping interface", "ping", "-I eth0", nil, "source address"},
		{"ping flood", "ping", "-f", nil, "flood"},
		{"unknown tool", "nc", "-l", nil, "unknown tool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseParam(tc.tool, tc.param)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("args = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBuildArgv(t *testing.T) {
	tests := []struct {
		name, tool, param, target, source string
		want                              []string
		wantErr                           string
	}{
		{"iperf3 default port", "iperf3", "-u -b 10M", "10.0.0.2", "", []string{"-c", "10.0.0.2", "-p", "5201", "--json", "-u", "-b", "10M"}, ""},
		{"iperf3 host:port", "iperf3", "", "10.0.0.2:7000", "10.0.0.1", []string{"-c", "10.0.0.2", "-p", "7000", "--json", "-B", "10.0.0.1"}, ""},
		{"iperf3 v6", "iperf3", "", "[fd63:6e70::2]:5202", "", []string{"-c", "fd63:6e70::2", "-p", "5202", "--json"}, ""},
		{"iperf3 bare v6", "iperf3", "", "fd63:6e70::2", "", []string{"-c", "fd63:6e70::2", "-p", "5201", "--json"}, ""},
		{"iperf2 adds -e once", "iperf", "-e -i 1", "pod.ns.svc", "", []string{"-c", "pod.ns.svc", "-p", "5001", "-e", "-i", "1"}, ""},
		{"ping default count", "ping", "", "10.0.0.2", "", []string{"-n", "-c", "5", "10.0.0.2"}, ""},
		{"ping user count", "ping", "-c 3 -i 0.2", "10.0.0.2", "10.0.0.1", []string{"-n", "-I", "10.0.0.1", "-c", "3", "-i", "0.2", "10.0.0.2"}, ""},
		{"traceroute", "traceroute", "-I -n", "10.0.0.2", "", []string{"-n", "-I", "10.0.0.2"}, ""},
		{"target flag", "ping", "", "-f", "", nil, "neither an IP address nor a host name"},
		{"target junk", "iperf3", "", "a b", "", nil, "target"},
		{"bad port", "iperf3", "", "10.0.0.2:0", "", nil, "1-65535"},
		{"bad source", "ping", "", "10.0.0.2", "eth0", nil, "not an IP address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := Build(tc.tool, tc.param, tc.target)
			var argv []string
			if err == nil {
				inv.Source = tc.source
				argv, err = inv.Argv()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(argv, tc.want) {
				t.Fatalf("argv = %q, want %q", argv, tc.want)
			}
		})
	}
	// An Invocation made by hand cannot smuggle arguments past the list.
	for _, args := range [][]string{{"-c", "10.0.0.9"}, {"-t", "5; id"}, {"--time=5"}} {
		inv := Invocation{Tool: "iperf3", Args: args, Target: "10.0.0.2"}
		if _, err := inv.Argv(); err == nil {
			t.Errorf("Argv accepted hand-made args %q", args)
		}
	}
}

func TestTimeout(t *testing.T) {
	tests := []struct {
		tool, param string
		want        time.Duration
	}{
		{"iperf3", "-t 30 -O 2", 42 * time.Second},
		{"iperf3", "", 20 * time.Second},
		{"iperf", "-t 2.5", 12500 * time.Millisecond},
		{"iperf3", "-n 1G", maxTimeout},
		{"ping", "-c 10 -i 0.2", 22 * time.Second},
		{"ping", "-c 4 -W 1", 15 * time.Second},
		{"ping", "-w 3", 13 * time.Second},
		{"traceroute", "", 40 * time.Second},
		{"traceroute", "-m 4 -q 2 -w 0.5", 10500 * time.Millisecond},
	}
	for _, tc := range tests {
		inv, err := Build(tc.tool, tc.param, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if got := inv.Timeout(); got != tc.want {
			t.Errorf("%s %q: timeout %v, want %v", tc.tool, tc.param, got, tc.want)
		}
	}
}
