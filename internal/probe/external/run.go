package external

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
)

// Default ports of the tools' servers, used when a target names no port.
const (
	DefaultIperf3Port = 5201
	DefaultIperf2Port = 5001
)

// MaxOutput bounds what is kept of a tool's stdout and of its stderr; the
// rest is dropped and the output marked truncated.
const MaxOutput = 4 << 20

// timeoutMargin is added to the duration a tool's arguments imply, for
// connection set-up, result exchange and process start.
const timeoutMargin = 10 * time.Second

// maxTimeout bounds runs whose duration the arguments do not fix (iperf -n).
const maxTimeout = 10 * time.Minute

// Invocation is one run of an external tool, built by Build from a task's
// tool, task_param and target.
type Invocation struct {
	// Tool is one of ToolIperf3, ToolIperf2, ToolPing, ToolTraceroute.
	Tool string
	// Args are the validated task_param arguments (ParseParam's output),
	// without the target and the flags cnperf adds itself.
	Args []string
	// Target is the destination: a host (IP address or name) for ping and
	// traceroute; for iperf3 and iperf "host:port" ("[v6addr]:port") or a
	// bare host, which means the tool's default port (5201, 5001).
	Target string
	// Source is an optional local address to send from (-B for iperf3 and
	// iperf, -I for ping, -s for traceroute).
	Source string
}

// Output is what a run produced.
type Output struct {
	Raw      string // stdout, bounded to MaxOutput
	Stderr   string // stderr, bounded to MaxOutput
	ExitCode int
	// Result is the parsed result, nil when parsing failed (Run then returns
	// the parse error and Raw still holds the output).
	Result *probe.Result
}

// Build validates param against tool's allow-list and target, and returns
// the Invocation. Set Source on it afterwards if needed.
func Build(tool, param, target string) (Invocation, error) {
	args, err := ParseParam(tool, param)
	if err != nil {
		return Invocation{}, err
	}
	inv := Invocation{Tool: tool, Args: args, Target: target}
	if _, err := inv.Argv(); err != nil {
		return Invocation{}, err
	}
	return inv, nil
}

// Argv returns the complete argument list (without the program name),
// checking everything again so that an Invocation made by hand can never
// carry what Build would refuse:
//
//	iperf3:     -c HOST -p PORT --json [-B SOURCE] ARGS...
//	iperf:      -c HOST -p PORT -e [-B SOURCE] ARGS...
//	ping:       -n [-c 5] [-I SOURCE] ARGS... HOST      (-c 5 unless ARGS set -c or -w)
//	traceroute: -n [-s SOURCE] ARGS... HOST
func (inv Invocation) Argv() ([]string, error) {
	if _, err := toolSpecs(inv.Tool); err != nil {
		return nil, err
	}
	// Re-check the args token by token: they must be exactly what
	// ParseParam accepts.
	again, err := ParseParam(inv.Tool, strings.Join(inv.Args, " "))
	if err != nil {
		return nil, err
	}
	if strings.Join(again, "\x00") != strings.Join(inv.Args, "\x00") {
		return nil, fmt.Errorf("%s arguments %q are not in validated form; build them with ParseParam", inv.Tool, inv.Args)
	}
	if inv.Source != "" && net.ParseIP(inv.Source) == nil {
		return nil, fmt.Errorf("%s source %q is not an IP address", inv.Tool, inv.Source)
	}
	switch inv.Tool {
	case ToolIperf3, ToolIperf2:
		def, extra := DefaultIperf3Port, "--json"
		if inv.Tool == ToolIperf2 {
			def, extra = DefaultIperf2Port, "-e"
		}
		host, port, err := splitTarget(inv.Target, def)
		if err != nil {
			return nil, fmt.Errorf("%s target: %w", inv.Tool, err)
		}
		argv := []string{"-c", host, "-p", strconv.Itoa(port), extra}
		if inv.Source != "" {
			argv = append(argv, "-B", inv.Source)
		}
		for _, a := range inv.Args {
			if a == extra || (extra == "-e" && a == "--enhanced") {
				continue // already there
			}
			argv = append(argv, a)
		}
		return argv, nil
	case ToolPing:
		if err := checkHost(inv.Target); err != nil {
			return nil, fmt.Errorf("ping target: %w", err)
		}
		argv := []string{"-n"}
		if !hasFlag(inv.Args, "-c", "-w") {
			argv = append(argv, "-c", "5")
		}
		if inv.Source != "" {
			argv = append(argv, "-I", inv.Source)
		}
		for _, a := range inv.Args {
			if a != "-n" {
				argv = append(argv, a)
			}
		}
		return append(argv, inv.Target), nil
	case ToolTraceroute:
		if err := checkHost(inv.Target); err != nil {
			return nil, fmt.Errorf("traceroute target: %w", err)
		}
		argv := []string{"-n"}
		if inv.Source != "" {
			argv = append(argv, "-s", inv.Source)
		}
		for _, a := range inv.Args {
			if a != "-n" {
				argv = append(argv, a)
			}
		}
		return append(argv, inv.Target), nil
	}
	return nil, fmt.Errorf("unknown tool %q", inv.Tool)
}

// checkHost accepts an IP address or a DNS name (never anything starting
// with "-", so a target cannot pose as a flag).
func checkHost(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	if net.ParseIP(h) != nil {
		return nil
	}
	if len(h) > 253 || !isHostname(h) {
		return fmt.Errorf("%q is neither an IP address nor a host name", h)
	}
	return nil
}

// isHostname reports whether h is labels separated by dots (and one
// final dot at most), each 1-63 letters, digits and '-', starting with a
// letter or digit. (The regular expression it replaces took 0.5 MB and
// 4,000 allocations to compile in the package's init, in every cnperf
// process, the idle agent's too.)
func isHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if len(label) == 0 || len(label) > 63 || !isAlnum(label[0]) {
			return false
		}
		for i := 1; i < len(label); i++ {
			if c := label[i]; !isAlnum(c) && c != '-' {
				return false
			}
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// splitTarget reads "host:port", "[v6]:port", a bare host or a bare IPv6
// address; a missing port is def.
func splitTarget(t string, def int) (string, int, error) {
	if t == "" {
		return "", 0, errors.New("empty target")
	}
	if ip := net.ParseIP(t); ip != nil { // bare address, IPv6 included
		return t, def, nil
	}
	host, ps, err := net.SplitHostPort(t)
	if err != nil {
		if strings.Contains(t, ":") {
			return "", 0, fmt.Errorf("%q: want host, host:port or [ipv6]:port", t)
		}
		host, ps = t, ""
	}
	if err := checkHost(host); err != nil {
		return "", 0, err
	}
	if ps == "" {
		return host, def, nil
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("%q: port %q must be 1-65535", t, ps)
	}
	return host, port, nil
}

// Timeout is how long Run lets the invocation take: the duration its
// arguments imply plus a margin.
func (inv Invocation) Timeout() time.Duration {
	tv := timingValues(inv.Tool, inv.Args)
	secs := func(k string, def float64) float64 {
		if v, ok := tv[k]; ok && v >= 0 {
			return v
		}
		return def
	}
	var d float64
	switch inv.Tool {
	case ToolIperf3, ToolIperf2:
		if _, ok := tv["bytes"]; ok {
			return maxTimeout
		}
		d = secs("time", 10) + secs("omit", 0)
	case ToolPing:
		if w, ok := tv["deadline"]; ok {
			d = w
		} else {
			c := secs("count", 5)
			d = c*secs("interval", 1) + secs("wait", 10)
		}
	case ToolTraceroute:
		// traceroute sends up to N probes at once and waits up to -w for
		// each batch; in the worst case every probe times out.
		probes := secs("maxttl", 30) * secs("queries", 3)
		batches := math.Ceil(probes / secs("simqueries", 16))
		d = batches*secs("wait", 5) + probes*secs("sendwait", 0)
	}
	t := time.Duration(d*float64(time.Second)) + timeoutMargin
	if t > maxTimeout {
		t = maxTimeout
	}
	return t
}

// Run executes the invocation without a shell (exec.CommandContext, in its
// own process group), bounded by Timeout and ctx; on either the whole group
// is killed. stdout and stderr are kept (each up to MaxOutput). A non-zero
// exit is an error carrying stderr's last lines, except ping's exit status
// 1, which only means replies were missing: its output still holds a
// measured 100 % (or partial) loss. The output is parsed into Output.Result;
// when parsing fails Result is nil, Raw is kept and the error says why.
func Run(ctx context.Context, inv Invocation) (Output, error) {
	argv, err := inv.Argv()
	if err != nil {
		return Output{}, err
	}
	path, err := exec.LookPath(inv.Tool)
	if err != nil {
		return Output{}, fmt.Errorf("run %s: %w", inv.Tool, err)
	}
	timeout := inv.Timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, path, argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 2 * time.Second
	stdout, stderr := newBoundedBuffer(MaxOutput), newBoundedBuffer(MaxOutput)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	started := time.Now()
	runErr := cmd.Run()
	out := Output{Raw: stdout.String(), Stderr: stderr.String(), ExitCode: -1}
	if cmd.ProcessState != nil {
		out.ExitCode = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		why := "timed out after " + timeout.String()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			why = "cancelled"
		}
		return out, fmt.Errorf("%s %s: %s%s", inv.Tool, strings.Join(argv, " "), why, tail(out))
	}
	if runErr != nil {
		var ee *exec.ExitError
		if !errors.As(runErr, &ee) || !(inv.Tool == ToolPing && out.ExitCode == 1) {
			return out, fmt.Errorf("%s %s: %w%s", inv.Tool, strings.Join(argv, " "), runErr, tail(out))
		}
	}
	var res *probe.Result
	switch inv.Tool {
	case ToolIperf3:
		res, err = ParseIperf3JSON([]byte(out.Raw))
	case ToolIperf2:
		res, err = ParseIperf2(out.Raw, "")
	case ToolPing:
		res, err = ParsePing(out.Raw)
	case ToolTraceroute:
		res, err = ParseTraceroute(out.Raw)
	}
	if err != nil {
		// Some tools exit 0 after a failure they only report on stderr
		// (iperf2's "tcp connect failed: Connection refused"): say it.
		return out, fmt.Errorf("parse %s output: %w%s", inv.Tool, err, stderrTail(out))
	}
	if res.StartedAt.IsZero() {
		res.StartedAt = started.UTC()
	}
	if res.Dst == "" {
		res.Dst = inv.Target
	}
	if res.Src == "" {
		res.Src = inv.Source
	}
	out.Result = res
	return out, nil
}

// stderrTail returns " (stderr: ...)" with stderr's last lines, or "".
func stderrTail(o Output) string {
	s := strings.TrimSpace(o.Stderr)
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return " (stderr: " + strings.Join(lines, "; ") + ")"
}

// tail returns ": " and the last lines of stderr (or of stdout when stderr
// is empty, as iperf3 --json reports errors there), or "".
func tail(o Output) string {
	s := strings.TrimSpace(o.Stderr)
	if s == "" {
		s = strings.TrimSpace(o.Raw)
		// iperf3 --json puts its error in a JSON field.
		var j struct {
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(s), &j) == nil && j.Error != "" {
			s = j.Error
		}
	}
	if s == "" {
		return ""
	}
	return ": " + lastLines(s, 5)
}

// lastLines returns the last n lines of s, joined with " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// killGroup kills cmd's whole process group (the tool and anything it
// started).
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// boundedBuffer keeps the first max bytes written to it and counts the rest.
type boundedBuffer struct {
	mu      sync.Mutex // guards buf and dropped
	buf     bytes.Buffer
	max     int
	dropped int64
}

func newBoundedBuffer(max int) *boundedBuffer { return &boundedBuffer{max: max} }

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - b.buf.Len()
	if room < len(p) {
		if room > 0 {
			b.buf.Write(p[:room])
		}
		b.dropped += int64(len(p) - max(room, 0))
		return len(p), nil
	}
	b.buf.Write(p)
	return len(p), nil
}

// String returns the kept output, with a note when some was dropped.
func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped > 0 {
		return b.buf.String() + "\n[cnperf: output truncated, " + strconv.FormatInt(b.dropped, 10) + " bytes dropped]\n"
	}
	return b.buf.String()
}
