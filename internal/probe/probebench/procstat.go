package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// What the bench reads of another process from /proc, to measure the CPU
// each rr end spends and where the kernel runs it:
//
//   - /proc/PID/task/TID/schedstat, first field: the thread's run time in
//     ns (se.sum_exec_runtime). Summed over the threads it is the
//     process's CPU time at ns resolution, the figure the CPU rows use.
//   - /proc/PID/task/TID/stat, field 39 (processor): the CPU the thread
//     last ran on, for the placement of the busiest thread.
//   - /proc/PID/stat, utime + stime (fields 14, 15) in clock ticks: the
//     whole thread group's CPU including threads that have exited, at
//     tick resolution (10 ms at USER_HZ 100), read at the window's ends to
//     cross-check the schedstat sum.

// threadStat is what one stat line says of a task.
type threadStat struct {
	ticks uint64 // utime + stime, clock ticks
	cpu   int    // processor: the CPU it last ran on
}

// parseStat reads utime, stime and processor from a /proc stat line. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted after its last ')'.
func parseStat(line string) (threadStat, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return threadStat{}, fmt.Errorf("stat line %.40q: no ')' after the command name", line)
	}
	// After ')' come fields 3 (state) onwards: field n is f[n-3].
	f := strings.Fields(line[i+1:])
	const utime, stime, processor = 14 - 3, 15 - 3, 39 - 3
	if len(f) <= processor {
		return threadStat{}, fmt.Errorf("stat line %.40q: %d fields after the command name, want at least %d", line, len(f), processor+1)
	}
	u, err1 := strconv.ParseUint(f[utime], 10, 64)
	s, err2 := strconv.ParseUint(f[stime], 10, 64)
	c, err3 := strconv.Atoi(f[processor])
	if err := errors.Join(err1, err2, err3); err != nil {
		return threadStat{}, fmt.Errorf("stat line %.40q: %w", line, err)
	}
	return threadStat{ticks: u + s, cpu: c}, nil
}

// parseSchedstat reads the run time in ns, the first of schedstat's three
// fields (run time, wait time, time slices).
func parseSchedstat(line string) (uint64, error) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return 0, fmt.Errorf("schedstat %q: want 3 fields", line)
	}
	ns, err := strconv.ParseUint(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("schedstat %q: %w", line, err)
	}
	return ns, nil
}

// taskReader reads the threads of one process, keeping each thread's
// schedstat file open between samples (re-read from offset 0: /proc's
// files are generated anew on a read at 0) so a sample costs a directory
// listing and one read per thread. The stat file, the larger one, is read
// only for the thread whose CPU is wanted.
type taskReader struct {
	pid   int
	dir   string
	sched map[int]*os.File
	buf   []byte
}

func newTaskReader(pid int) *taskReader {
	return &taskReader{pid: pid, dir: "/proc/" + strconv.Itoa(pid) + "/task/", sched: map[int]*os.File{}, buf: make([]byte, 1024)}
}

// read returns every thread's run time in ns. A thread that exits between
// the listing and its read is left out; the process gone is an error.
func (r *taskReader) read() (map[int]uint64, error) {
	names, err := readDirNames(r.dir)
	if err != nil {
		return nil, fmt.Errorf("list threads of %d: %w", r.pid, err)
	}
	out := make(map[int]uint64, len(names))
	for _, name := range names {
		tid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		f := r.sched[tid]
		if f == nil {
			if f, err = os.Open(r.dir + name + "/schedstat"); err != nil {
				continue // exited after the listing
			}
			r.sched[tid] = f
		}
		n, err := f.ReadAt(r.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			continue // exited: its file reads ESRCH
		}
		ns, err := parseSchedstat(string(r.buf[:n]))
		if err != nil {
			return nil, fmt.Errorf("thread %d of %d: %w", tid, r.pid, err)
		}
		out[tid] = ns
	}
	for tid, f := range r.sched {
		if _, ok := out[tid]; !ok {
			f.Close()
			delete(r.sched, tid)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("process %d: no thread readable", r.pid)
	}
	return out, nil
}

// cpuOf is the CPU thread tid last ran on (stat's processor).
func (r *taskReader) cpuOf(tid int) (int, error) {
	b, err := os.ReadFile(r.dir + strconv.Itoa(tid) + "/stat")
	if err != nil {
		return 0, err
	}
	s, err := parseStat(string(b))
	return s.cpu, err
}

func (r *taskReader) close() {
	for tid, f := range r.sched {
		f.Close()
		delete(r.sched, tid)
	}
}

func readDirNames(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// readGroupTicks is utime + stime of pid's whole thread group, exited
// threads included, in clock ticks.
func readGroupTicks(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s, err := parseStat(string(b))
	return s.ticks, err
}

// readComm is pid's command name (the executable's base name, cut at 15
// bytes).
func readComm(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b)), err
}

// commOf is the comm the kernel gives a process that executed path.
func commOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		path = path[i+1:]
	}
	if len(path) > 15 {
		path = path[:15]
	}
	return path
}

// clockTicks is the kernel's USER_HZ, the unit of stat's utime and stime,
// from this process's auxiliary vector (AT_CLKTCK, what sysconf(_SC_CLK_TCK)
// returns); 100 on every Linux architecture Go runs on, but read, not
// assumed.
func clockTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 0, fmt.Errorf("read auxv: %w", err)
	}
	return auxvValue(b, 17) // AT_CLKTCK
}

// auxvValue finds key in an auxiliary vector of native-endian 64-bit
// pairs.
func auxvValue(b []byte, key uint64) (uint64, error) {
	for len(b) >= 16 {
		k, v := binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])
		if k == key {
			return v, nil
		}
		if k == 0 { // AT_NULL
			break
		}
		b = b[16:]
	}
	return 0, fmt.Errorf("auxv: no entry %d", key)
}
