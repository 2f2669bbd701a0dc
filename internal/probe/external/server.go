package external

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServerReadyTimeout bounds how long StartServer waits for a server to bind.
const ServerReadyTimeout = 5 * time.Second

// ErrPortInUse is the error of a server that exited because its port was
// taken ("Address already in use").
var ErrPortInUse = errors.New("port in use")

// Server is an iperf3 or iperf2 server process started by StartServer.
type Server struct {
	tool string
	udp  bool
	addr string
	cmd  *exec.Cmd
	out  *boundedBuffer
	done chan struct{} // closed when the process has exited
	werr error         // the process's exit status; read after done

	closeOnce sync.Once
	closeErr  error
}

// StartServer starts the destination side of a throughput test: for tool
// "iperf3", `iperf3 -s -1 -B bind -p port` (one test, then it exits; iperf3
// always uses a TCP control connection, so udp only matters to iperf2); for
// tool "iperf", `iperf -s -e [-u] -B bind -p port` (iperf2's UDP server
// needs -u). When port is 0 the tool's default port is used (5201, 5001).
// bind may be empty to listen on every address.
//
// A server is ready when the kernel shows the process's own socket bound to
// the port: StartServer reads /proc/PID/fd and /proc/PID/net/{tcp,udp}[6],
// which also works when the process was started in another network
// namespace. It does not probe the port with a connection, because an
// iperf3 -1 server counts any connection as its one test. StartServer
// returns an error if the process exits or the deadline
// (ServerReadyTimeout, or ctx) passes first. The process is killed when ctx
// ends or Close is called.
func StartServer(ctx context.Context, tool string, udp bool, bind string, port int) (*Server, error) {
	return startServer(ctx, tool, udp, bind, port, nil)
}

// StartServerWith is StartServer with a custom process starter, such as
// nettest's NS.Start to run the server in another network namespace.
func StartServerWith(ctx context.Context, tool string, udp bool, bind string, port int, start func(*exec.Cmd) error) (*Server, error) {
	return startServer(ctx, tool, udp, bind, port, start)
}

func startServer(ctx context.Context, tool string, udp bool, bind string, port int, start func(*exec.Cmd) error) (*Server, error) {
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("start %s server: port %d out of range 0-65535", tool, port)
	}
	if bind != "" {
		if net.ParseIP(bind) == nil {
			return nil, fmt.Errorf("start %s server: bind address %q is not an IP address", tool, bind)
		}
	}
	var args []string
	switch tool {
	case ToolIperf3:
		if port == 0 {
			port = DefaultIperf3Port
		}
		args = []string{"-s", "-1", "-p", strconv.Itoa(port)}
	case ToolIperf2:
		if port == 0 {
			port = DefaultIperf2Port
		}
		args = []string{"-s", "-e", "-p", strconv.Itoa(port)}
		if udp {
			args = append(args, "-u")
		}
	default:
		return nil, fmt.Errorf("start server: tool %q has no server (want %s or %s)", tool, ToolIperf3, ToolIperf2)
	}
	if bind != "" {
		args = append(args, "-B", bind)
	}
	path, err := exec.LookPath(tool)
	if err != nil {
		return nil, fmt.Errorf("start %s server: %w", tool, err)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = time.Second
	out := newBoundedBuffer(MaxOutput)
	cmd.Stdout = out
	cmd.Stderr = out
	if start == nil {
		start = (*exec.Cmd).Start
	}
	if err := start(cmd); err != nil {
		return nil, fmt.Errorf("start %s server: %w", tool, err)
	}
	host := bind
	if host == "" {
		host = "0.0.0.0"
	}
	s := &Server{tool: tool, udp: udp && tool == ToolIperf2, addr: net.JoinHostPort(host, strconv.Itoa(port)),
		cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		s.werr = cmd.Wait()
		close(s.done)
	}()

	deadline := time.NewTimer(ServerReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	proto := "tcp"
	if s.udp {
		proto = "udp"
	}
	for {
		ok, err := bound(cmd.Process.Pid, proto, port)
		if err == nil && ok {
			return s, nil
		}
		select {
		case <-s.done:
			err := fmt.Errorf("%s server on %s exited before it was ready (%v): %s", tool, s.addr, s.werr, lastLines(out.String(), 5))
			if strings.Contains(out.String(), "Address already in use") {
				err = fmt.Errorf("%w: %w", ErrPortInUse, err)
			}
			return nil, err
		case <-ctx.Done():
			_ = s.Close()
			return nil, fmt.Errorf("%s server on %s: %w", tool, s.addr, ctx.Err())
		case <-deadline.C:
			_ = s.Close()
			return nil, fmt.Errorf("%s server on %s not bound after %v (last check: %v): %s", tool, s.addr, ServerReadyTimeout, err, lastLines(out.String(), 5))
		case <-tick.C:
		}
	}
}

// Addr returns the address the server listens on (host:port; 0.0.0.0 when
// it binds every address).
func (s *Server) Addr() string { return s.addr }

// Port returns the server's port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Output returns what the server has printed so far (bounded to
// MaxOutput). iperf2's server prints the UDP latency histogram
// (--udp-histogram) only here; ParseIperf2 reads it.
func (s *Server) Output() string { return s.out.String() }

// Done is closed when the server process has exited (an iperf3 -1 server
// exits after its one test).
func (s *Server) Done() <-chan struct{} { return s.done }

// Close kills the server's process group and waits for it to exit. It is
// safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		select {
		case <-s.done:
			return
		default:
		}
		if err := killGroup(s.cmd); err != nil && !errors.Is(err, os.ErrProcessDone) {
			s.closeErr = fmt.Errorf("kill %s server: %w", s.tool, err)
		}
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			s.closeErr = errors.Join(s.closeErr, fmt.Errorf("%s server (pid %d) did not exit 5s after SIGKILL", s.tool, s.cmd.Process.Pid))
		}
	})
	return s.closeErr
}

// bound reports whether process pid owns a socket bound to port (TCP in
// LISTEN state, or UDP), reading /proc so the check works in any network
// namespace.
func bound(pid int, proto string, port int) (bool, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return false, err
	}
	if len(inodes) == 0 {
		return false, nil
	}
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{proto, proto + "6"} {
		ok, err := scanProcNet(filepath.Join("/proc", strconv.Itoa(pid), "net", f), want, proto, inodes)
		if err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

func socketInodes(pid int) (map[string]bool, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // the fd closed meanwhile
		}
		if strings.HasPrefix(l, "socket:[") && strings.HasSuffix(l, "]") {
			inodes[l[len("socket:["):len(l)-1]] = true
		}
	}
	return inodes, nil
}

func scanProcNet(path, portSuffix, proto string, inodes map[string]bool) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return false, nil // no IPv6 in this kernel
		}
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		fl := strings.Fields(sc.Text())
		if len(fl) < 10 || !strings.HasSuffix(fl[1], portSuffix) || !inodes[fl[9]] {
			continue
		}
		if proto == "tcp" && fl[3] != "0A" { // TCP_LISTEN
			continue
		}
		return true, nil
	}
	return false, sc.Err()
}

// StartServerOnFreePort is StartServer on a port free for both TCP and UDP
// on bind (iperf3 uses one port for its TCP control and its UDP data;
// iperf2 one or the other). A port found free can be taken by another
// process before the tool binds it (seen in a loaded test run); another
// port is tried then, three times in all.
func StartServerOnFreePort(ctx context.Context, tool string, udp bool, bind string) (*Server, error) {
	var err error
	for range 3 {
		var port int
		if port, err = freeServerPort(bind); err != nil {
			return nil, err
		}
		var srv *Server
		if srv, err = StartServer(ctx, tool, udp, bind, port); !errors.Is(err, ErrPortInUse) {
			return srv, err
		}
	}
	return nil, err
}

// freeServerPort finds a port free for both TCP and UDP on ip.
func freeServerPort(ip string) (int, error) {
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, fmt.Errorf("find a free port on %s: %w", ip, err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, strconv.Itoa(port)))
		ln.Close()
		if err != nil {
			lastErr = err
			continue
		}
		pc.Close()
		return port, nil
	}
	return 0, fmt.Errorf("find a free port on %s: %w", ip, lastErr)
}
