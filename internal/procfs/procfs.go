// Package procfs reads the /proc stat lines cnperf's benchmarks sample to
// see what another process spends (CPU time, the CPU a thread last ran
// on), and the network counters a queue watch samples (/proc/net/snmp,
// /proc/net/softnet_stat). Only what they need.
package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Field numbers of a /proc/PID/stat (or task/TID/stat) line as proc(5)
// counts them, for Field.
const (
	Ppid      = 4  // the parent's pid
	Utime     = 14 // user time, clock ticks
	Stime     = 15 // system time, clock ticks
	Processor = 39 // the CPU the task last ran on
)

// StatFields splits a stat line into its fields after the command name.
// The name (field 2) is in parentheses and may itself hold spaces and
// parentheses, so the split starts after its last ')': field 3 (state)
// comes first. ok is false when the line has no ')'.
func StatFields(line string) (fields []string, ok bool) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(line[i+1:]), true
}

// Field returns field n (as proc(5) numbers them, n ≥ 3) of fields from
// StatFields, as an unsigned integer.
func Field(fields []string, n int) (uint64, error) {
	if n < 3 || n-3 >= len(fields) {
		return 0, fmt.Errorf("stat field %d: the line has %d fields after the command name", n, len(fields))
	}
	v, err := strconv.ParseUint(fields[n-3], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat field %d: %w", n, err)
	}
	return v, nil
}

// ReadStat returns the fields of /proc/PID/stat after the command name.
func ReadStat(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	f, ok := StatFields(string(b))
	if !ok {
		return nil, fmt.Errorf("/proc/%d/stat: no ')' after the command name", pid)
	}
	return f, nil
}
