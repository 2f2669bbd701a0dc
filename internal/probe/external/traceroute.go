package external

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
)

var (
	// traceroute to 198.18.2.1 (198.18.2.1), 30 hops max, 60 byte packets
	traceHeaderRE = regexp.MustCompile(`^traceroute to (\S+) \(([^)]+)\), (\d+) hops max, (\d+) byte packets$`)
	traceHopRE    = regexp.MustCompile(`^\s*(\d+)\s+(.*)$`)
	// !H, !N, !P, !S, !F-1500, !X, !V, !C, !<10>: what the reply said.
	traceAnnotRE = regexp.MustCompile(`^!(?:[A-Z](?:-\d+)?|<\d+>|\d+)?$`)
)

// ParseTraceroute reads the text output of `traceroute -n` (Linux
// traceroute 2.x, any method) into a Result with Kind "trace" and Tool
// "traceroute". Each hop has its TTL, the address that answered first and
// the RTTs of the probes that got a reply; a "*" (no reply) adds no RTT, so
// len(rtt_ms) is the number of replies, and a hop where no probe got a
// reply has no address. Reached marks the hop whose address is the
// destination. ICMP annotations (!H, !N, ...) and several addresses on one
// hop are kept in Notes. Anything else is an error.
func ParseTraceroute(out string) (*probe.Result, error) {
	r := &probe.Result{Kind: "trace", Tool: ToolTraceroute, Raw: out}
	var dest string
	for i, line := range strings.Split(out, "\n") {
		line = strings.TrimRight(line, "\r ")
		if line == "" {
			continue
		}
		fail := func(why string) error {
			return fmt.Errorf("traceroute output line %d %q: %s", i+1, line, why)
		}
		if dest == "" {
			m := traceHeaderRE.FindStringSubmatch(line)
			if m == nil {
				return nil, fail("want the \"traceroute to\" header first")
			}
			dest = m[2]
			r.Dst = dest
			continue
		}
		m := traceHopRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fail("not a hop line")
		}
		ttl, err := strconv.Atoi(m[1])
		if err != nil || ttl < 1 || ttl > 255 {
			return nil, fail("bad ttl")
		}
		if n := len(r.Hops); n > 0 && r.Hops[n-1].TTL >= ttl {
			return nil, fail("ttl out of order")
		}
		hop := probe.Hop{TTL: ttl, RTTms: []float64{}}
		cur := ""
		tok := strings.Fields(m[2])
		for j := 0; j < len(tok); j++ {
			t := tok[j]
			switch {
			case t == "*":
			case net.ParseIP(t) != nil:
				cur = t
				if hop.Addr == "" {
					hop.Addr = t
				} else if t != hop.Addr {
					r.Notes = append(r.Notes, fmt.Sprintf("hop %d: replies from %s too", ttl, t))
				}
			case traceAnnotRE.MatchString(t):
				r.Notes = append(r.Notes, fmt.Sprintf("hop %d: %s %s", ttl, cur, t))
			default:
				v, err := strconv.ParseFloat(t, 64)
				if err != nil || v < 0 || j+1 >= len(tok) || tok[j+1] != "ms" {
					return nil, fail(fmt.Sprintf("token %q is not an address, \"*\", an annotation or an RTT in ms", t))
				}
				if cur == "" {
					return nil, fail("an RTT before any address")
				}
				hop.RTTms = append(hop.RTTms, v)
				j++ // "ms"
			}
		}
		if hop.Addr != "" && hop.Addr == dest {
			hop.Reached = true
		}
		r.Hops = append(r.Hops, hop)
	}
	if dest == "" {
		return nil, fmt.Errorf("traceroute output: empty (no header)")
	}
	if len(r.Hops) == 0 {
		return nil, fmt.Errorf("traceroute output: no hops")
	}
	return r, nil
}
