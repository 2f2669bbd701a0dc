package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/procfs"
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
	f, ok := procfs.StatFields(line)
	if !ok {
		return threadStat{}, fmt.Errorf("stat line %.40q: no ')' after the command name", line)
	}
	u, err1 := procfs.Field(f, procfs.Utime)
	s, err2 := procfs.Field(f, procfs.Stime)
	c, err3 := procfs.Field(f, procfs.Processor)
	if err := errors.Join(err1, err2, err3); err != nil {
		return threadStat{}, fmt.Errorf("stat line %.40q: %w", line, err)
	}
	return threadStat{ticks: u + s, cpu: int(c)}, nil
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

// taskReader reads the threads of one process as cheaply as it can, for
// the sampling shares the two CPUs with what it measures: each thread's
// schedstat and stat files stay open between samples and are re-read from
// offset 0 (/proc generates them anew on a read at 0: 2 µs for schedstat,
// 5 µs for stat here, against 20 µs to open, read and close stat), the
// stat file only for the thread whose CPU is wanted, and the thread list
// is read at every sample until listRarely is called, then only every
// listEvery samples (13 µs a listing). A thread created between two
// listings is found at the next one and its run time then counted from
// zero, so no CPU time is lost, only its chance to be the busiest for up
// to listEvery samples; a thread that exits is dropped when its file read
// fails.
type taskReader struct {
	pid     int
	dir     string
	sched   map[int]int // thread id → open file descriptor
	stat    map[int]int
	buf     []byte
	samples int
	rarely  bool
}

// listRarely makes read list the threads only every listEvery samples
// from now on. The watch calls it once a window has started, when every
// thread that ran before is known: a thread found later was created in
// the window, and all its run time is the window's.
func (r *taskReader) listRarely() { r.rarely, r.samples = true, 1 }

const listEvery = 10

func newTaskReader(pid int) *taskReader {
	return &taskReader{pid: pid, dir: "/proc/" + strconv.Itoa(pid) + "/task/",
		sched: map[int]int{}, stat: map[int]int{}, buf: make([]byte, 1024)}
}

// read returns every thread's run time in ns; the process gone is an
// error.
func (r *taskReader) read() (map[int]uint64, error) {
	if !r.rarely || r.samples%listEvery == 0 {
		if err := r.list(); err != nil {
			return nil, err
		}
	}
	r.samples++
	out := make(map[int]uint64, len(r.sched))
	for tid, fd := range r.sched {
		n, err := unix.Pread(fd, r.buf, 0)
		if err != nil {
			r.drop(tid) // exited: its file reads ESRCH
			continue
		}
		ns, err := parseSchedstat(string(r.buf[:n]))
		if err != nil {
			return nil, fmt.Errorf("thread %d of %d: %w", tid, r.pid, err)
		}
		out[tid] = ns
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("process %d: no thread readable", r.pid)
	}
	return out, nil
}

// list opens the schedstat file of every thread not yet open.
func (r *taskReader) list() error {
	names, err := readDirNames(r.dir)
	if err != nil {
		return fmt.Errorf("list threads of %d: %w", r.pid, err)
	}
	for _, name := range names {
		tid, err := strconv.Atoi(name)
		if _, open := r.sched[tid]; err != nil || open {
			continue
		}
		if fd, err := openProc(r.dir + name + "/schedstat"); err == nil {
			r.sched[tid] = fd
		} // else exited after the listing
	}
	return nil
}

// cpuOf is the CPU thread tid last ran on (stat's processor).
func (r *taskReader) cpuOf(tid int) (int, error) {
	fd, open := r.stat[tid]
	if !open {
		var err error
		if fd, err = openProc(r.dir + strconv.Itoa(tid) + "/stat"); err != nil {
			return 0, err
		}
		r.stat[tid] = fd
	}
	n, err := unix.Pread(fd, r.buf, 0)
	if err != nil {
		r.drop(tid)
		return 0, err
	}
	s, err := parseStat(string(r.buf[:n]))
	return s.cpu, err
}

func (r *taskReader) drop(tid int) {
	for _, m := range []map[int]int{r.sched, r.stat} {
		if fd, open := m[tid]; open {
			unix.Close(fd)
			delete(m, tid)
		}
	}
}

// openProc opens a /proc file for pread (one system call a read, where
// os.File.ReadAt makes a second to see the end).
func openProc(path string) (int, error) {
	return unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

func (r *taskReader) close() {
	for tid := range r.sched {
		r.drop(tid)
	}
	for tid := range r.stat {
		r.drop(tid)
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
