package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// SNMP holds the counters of /proc/net/snmp, by protocol and name
// ("Tcp" "RetransSegs"). The file belongs to the reading thread's
// network namespace.
type SNMP map[string]map[string]int64

// Get returns the counter of proto named name, and whether the file had it.
func (s SNMP) Get(proto, name string) (int64, bool) {
	v, ok := s[proto][name]
	return v, ok
}

// ReadSNMP reads /proc/net/snmp of the calling thread's namespace
// (/proc/thread-self/net/snmp).
func ReadSNMP() (SNMP, error) {
	b, err := os.ReadFile("/proc/thread-self/net/snmp")
	if err != nil {
		return nil, fmt.Errorf("read /proc/thread-self/net/snmp: %w", err)
	}
	return ParseSNMP(string(b))
}

// ParseSNMP parses the text of /proc/net/snmp: for each protocol a line
// of names and then a line of values, both led by "Proto:".
func ParseSNMP(text string) (SNMP, error) {
	out := SNMP{}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines)%2 != 0 {
		return nil, fmt.Errorf("snmp: %d lines, want pairs of names and values", len(lines))
	}
	for i := 0; i < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || len(names) != len(values) || names[0] != values[0] || !strings.HasSuffix(names[0], ":") {
			return nil, fmt.Errorf("snmp: lines %d and %d do not pair names with values", i+1, i+2)
		}
		proto := strings.TrimSuffix(names[0], ":")
		m := map[string]int64{}
		for j := 1; j < len(names); j++ {
			v, err := strconv.ParseInt(values[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("snmp: %s %s: %w", proto, names[j], err)
			}
			m[names[j]] = v
		}
		out[proto] = m
	}
	return out, nil
}

// Softnet is the sum over the CPUs of /proc/net/softnet_stat: packets
// the receive backlog dropped (its queue full) and times the receive
// softirq ran out of budget or time with work left (time_squeeze). The
// file is the host's, whatever the namespace.
type Softnet struct {
	Dropped, Squeezed uint64
}

// ReadSoftnet reads /proc/net/softnet_stat.
func ReadSoftnet() (Softnet, error) {
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		return Softnet{}, fmt.Errorf("read /proc/net/softnet_stat: %w", err)
	}
	return ParseSoftnet(string(b))
}

// ParseSoftnet parses softnet_stat: a line per CPU of hexadecimal
// columns, the second dropped, the third time_squeeze.
func ParseSoftnet(text string) (Softnet, error) {
	var s Softnet
	for i, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			return Softnet{}, fmt.Errorf("softnet_stat line %d: %d columns, want at least 3", i+1, len(f))
		}
		d, err1 := strconv.ParseUint(f[1], 16, 64)
		q, err2 := strconv.ParseUint(f[2], 16, 64)
		if err1 != nil || err2 != nil {
			return Softnet{}, fmt.Errorf("softnet_stat line %d: columns not hexadecimal: %q", i+1, line)
		}
		s.Dropped += d
		s.Squeezed += q
	}
	return s, nil
}
