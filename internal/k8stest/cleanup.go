package k8stest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cleanup removes every trace of a harness cluster: processes recorded in
// the run directory, containers in the nodes' cgroups, containerd shims of
// the nodes' sockets, mounts under the run and socket directories, the
// namespaces and veth, the cgroups, and the run directory; and it restores
// saved sysctls. It is what Down does, and what Up does first with the
// leftovers of a run that crashed.
func Cleanup(cacheDir string, log *slog.Logger) error {
	runDir := filepath.Join(cacheDir, "run")
	sockDir := "/run/cnperf-k8s"
	var errs []error
	killRecorded(filepath.Join(runDir, "pids"))
	killShims(sockDir)
	for _, name := range cgroupRoots() {
		killCgroup(name)
	}
	killShims(sockDir)
	errs = append(errs, unmountUnder(runDir, sockDir))
	for _, ns := range harnessNetns() {
		if err := run(context.Background(), "ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	// Deleting the underlay's namespace above removes the veth's peer and
	// with it rootVeth, a moment later: a del that finds it gone already
	// is no failure (seen: "RTNETLINK answers: No such device").
	if _, err := os.Stat("/sys/class/net/" + rootVeth); err == nil {
		if err := run(context.Background(), "ip", "link", "del", rootVeth); err != nil {
			if _, serr := os.Stat("/sys/class/net/" + rootVeth); serr == nil {
				errs = append(errs, err)
			}
		}
	}
	for _, name := range cgroupRoots() {
		errs = append(errs, removeCgroup(name))
	}
	if err := restoreSysctls(filepath.Join(runDir, "sysctls.json")); err != nil {
		errs = append(errs, err)
	}
	for _, d := range []string{runDir, sockDir} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	err := errors.Join(errs...)
	if err != nil && log != nil {
		log.Warn("cleanup incomplete", "err", err)
	}
	return err
}

func killRecorded(pidFile string) {
	f, err := os.Open(pidFile)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			continue
		}
		pid, err := strconv.Atoi(fields[0])
		if err != nil || pid <= 1 {
			continue
		}
		// Only if the pid still runs the program recorded for it.
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || filepath.Base(exe) != filepath.Base(fields[1]) {
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// killShims kills containerd shims started for the harness's sockets.
func killShims(sockDir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.Contains(filepath.Base(args[0]), "containerd-shim") && strings.Contains(string(cmdline), sockDir+"/") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func cgroupRoots() []string {
	ents, _ := os.ReadDir("/sys/fs/cgroup/memory")
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), prefix+"-node") {
			out = append(out, e.Name())
		}
	}
	return out
}

// killCgroup kills every process in the cgroup subtree (they are the
// nodes' containers) until none is left.
func killCgroup(name string) {
	for i := 0; i < 50; i++ {
		n := 0
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup/memory", name), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
		if n == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func removeCgroup(name string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			var err error
			for i := 0; i < 20; i++ {
				if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unmountUnder detaches every mount below the given directories, deepest
// first.
func unmountUnder(dirs ...string) error {
	var errs []error
	for pass := 0; pass < 3; pass++ {
		mounts := mountsUnder(dirs...)
		if len(mounts) == 0 {
			return nil
		}
		errs = nil
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}

func mountsUnder(dirs ...string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				out = append(out, mp)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func harnessNetns() []string {
	ents, _ := os.ReadDir("/var/run/netns")
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func saveSysctls(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil // keep the first saved values
	}
	vals := map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return fmt.Errorf("save sysctl %s: %w", k, err)
		}
		vals[k] = strings.TrimSpace(string(b))
	}
	b, _ := json.Marshal(vals)
	return os.WriteFile(path, b, 0o644)
}

func restoreSysctls(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	vals := map[string]string{}
	if err := json.Unmarshal(b, &vals); err != nil {
		return fmt.Errorf("saved sysctls %s: %w", path, err)
	}
	var errs []error
	for k, v := range vals {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}

// SysctlsNow reads the sysctls kubelet changes (for tests that check the
// restore).
func SysctlsNow() map[string]string {
	out := map[string]string{}
	for _, k := range kubeletSysctls {
		b, _ := os.ReadFile("/proc/sys/" + k)
		out[k] = strings.TrimSpace(string(b))
	}
	return out
}
