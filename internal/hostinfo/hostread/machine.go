package hostread

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/hostinfo"
)

// Machine reads what the machine the calling process runs on is: kernel
// release, OS image (PRETTY_NAME of os-release), CPUs, CPU model and
// memory. In the lab every node is this machine.
func Machine() (hostinfo.Node, error) {
	var n hostinfo.Node
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return n, fmt.Errorf("uname: %w", err)
	}
	n.Kernel = unix.ByteSliceToString(uts.Release[:])
	n.CPUs = runtime.NumCPU()
	n.OSImage = osImage()
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n.CPUModel = cpuModel(b)
	}
	mem, err := memTotal()
	if err != nil {
		return n, err
	}
	n.MemoryBytes = mem
	return n, nil
}

// osImage is os-release's PRETTY_NAME ("Debian GNU/Linux 12 (bookworm)").
func osImage() string {
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				return strings.Trim(v, `"'`)
			}
		}
	}
	return ""
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memTotal is /proc/meminfo's MemTotal in bytes.
func memTotal() (uint64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseUint(f[0], 10, 64)
				if err == nil {
					return kb * 1024, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("memory: no MemTotal in /proc/meminfo")
}
