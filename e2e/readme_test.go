package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnperf/cnperf/internal/cnperftest"
	"github.com/cnperf/cnperf/internal/nettest"
)

// readmeCommand is one command of a README code block: its words (quotes
// removed), its trailing comment, whether it runs in the background (&)
// and the file its output goes to (> FILE).
type readmeCommand struct {
	line       int
	text       string
	words      []string
	comment    string
	background bool
	stdout     string
	// complex names what a simple command runner cannot run (a pipe, a
	// substitution, a list): such a command must be in readmeNotRun.
	complex string
}

// readmeCommands reads the commands of README.md's ```sh blocks: a line
// continued with a backslash or inside an open quote joins the next.
func readmeCommands(data []byte) ([]readmeCommand, error) {
	var out []readmeCommand
	in := false
	var pending strings.Builder
	start := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case in && strings.HasPrefix(line, "```"):
			in = false
			if pending.Len() > 0 {
				return nil, fmt.Errorf("README.md:%d: a command runs past its block's end", start)
			}
			continue
		case !in:
			continue
		}
		if pending.Len() == 0 {
			start = n
		} else {
			pending.WriteString("\n")
		}
		pending.WriteString(line)
		c, complete, err := parseCommand(pending.String())
		if err != nil {
			return nil, fmt.Errorf("README.md:%d: %w", start, err)
		}
		if !complete {
			continue
		}
		pending.Reset()
		if len(c.words) == 0 {
			continue // a blank or comment line
		}
		c.line = start
		out = append(out, c)
	}
	return out, sc.Err()
}

// parseCommand splits s as a POSIX shell splits one simple command
// (single and double quotes, backslash-newline, # comments, a trailing &,
// > FILE); complete is false while a quote or a continuation is open.
func parseCommand(s string) (c readmeCommand, complete bool, err error) {
	c.text = s
	var w strings.Builder
	inWord, quote := false, rune(0)
	flush := func() {
		if inWord {
			c.words = append(c.words, w.String())
			w.Reset()
			inWord = false
		}
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(rs) && rs[i+1] == '\n':
			i++
		case r == '\\' && i+1 == len(rs):
			return c, false, nil
		case r == ' ' || r == '\t' || r == '\n':
			flush()
		case r == '#' && !inWord:
			c.comment = strings.TrimSpace(string(rs[i+1:]))
			i = len(rs)
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return c, false, nil
	}
	flush()
	if n := len(c.words); n > 0 && c.words[n-1] == "&" {
		c.background, c.words = true, c.words[:n-1]
	}
	if n := len(c.words); n >= 2 && c.words[n-2] == ">" {
		c.stdout, c.words = c.words[n-1], c.words[:n-2]
	}
	for _, x := range c.words {
		if strings.ContainsAny(x, "|;<>`$") {
			c.complex = "a pipe, list, redirection or substitution (" + x + ")"
		}
	}
	return c, true, nil
}

// readmeNotRun are the README's commands this test does not run, by the
// start of their text, each with the reason. Every entry must match a
// command of README.md, so the list cannot outlive what it excuses.
var readmeNotRun = []struct{ prefix, why string }{
	{"make build", "builds into the repository's bin/; the test runs a freshly built binary in its place"},
	{"sudo ", "needs root and builds a lab (network namespaces, the real server and agents): the lab tests and make demo cover it"},
	{"make bench-", "a benchmark of minutes, root, machine figures"},
	{"make test", "the whole test suite"},
	{"go test", "the test suite itself"},
	{"bin/cnperf k8s ", "needs a Kubernetes cluster (internal/k8stest)"},
	{"bin/cnperf run baseline --k8s", "needs a Kubernetes cluster"},
	{"bin/cnperf run shaping --k8s", "needs a Kubernetes cluster"},
	{"bin/cnperf run qos-priority --k8s", "needs a Kubernetes cluster"},
	{"bin/cnperf run policing --k8s", "needs a Kubernetes cluster"},
	{"kubectl ", "needs a Kubernetes cluster"},
	{"helm ", "needs a Kubernetes cluster and helm"},
	{"ctr ", "containerd on a cluster node"},
	{"bin/cnperf image push", "pushes to a registry"},
	{"bin/cnperf image build", "writes an image tarball of the binary (tested in internal/image, internal/cli)"},
	{"ln -s", "installs into /usr/local/bin"},
	{"bin/cnperf lab run", "needs root to build a lab (network namespaces): the suites' lab tests run these"},
	{"bin/cnperf qos show --netns NS", "NS and DEV are placeholders for a namespace and a link"},
	{"bin/cnperf run baseline --server URL", "URL and TOKEN are placeholders for a server"},
	{"curl ", "needs a running server ($SERVER, $TOKEN): e2e's control-plane tests use the API"},
	{"H=", "a shell variable for the curl lines below"},
	{"export ", "random tokens through a command substitution, for the long-running server below"},
	{"bin/cnperf server ", "a long-running server (e2e's control-plane tests run it)"},
	{"bin/cnperf agent ", "a long-running agent joined to a server (e2e's control-plane tests run it)"},
	{"bin/cnperf schedule ", "needs a running server"},
	{"cnperf report RUN_ID", "RUN_ID is a placeholder for a stored run on a server"},
	{"cnperf compare ", "RUN_A, RUN_B and RUN... are placeholders for stored runs on a server"},
}

// announcedExit is the exit code a command's README comment announces
// ("exit 3 when ..."), or 0.
var announcedExit = regexp.MustCompile(`\bexits? (\d+)\b`)

// TestReadmeCommands runs every command of README.md that needs no
// cluster, no root-built lab and no running server, as written, against a
// freshly built binary, in a network namespace of its own (the README's
// fixed loopback ports stay off the shared machine's), in order, with the
// background ones (&) left running for the commands after them. A
// non-zero exit the README does not announce fails the test; a command a
// missing tool (iperf3) cannot run is named and skipped.
func TestReadmeCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the README's probes for several seconds each")
	}
	nettest.Require(t)
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := readmeCommands(data)
	if err != nil {
		t.Fatal(err)
	}
	bin := cnperftest.Binary(t)
	ns, err := nettest.NewNS(nettest.Prefix + "readme")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nettest.Delete(ns); err != nil {
			t.Error(err)
		}
	})
	if err := ns.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	used := make([]bool, len(readmeNotRun))
	ran := 0
	for _, c := range cmds {
		excused := false
		for i, n := range readmeNotRun {
			if strings.HasPrefix(c.text, n.prefix) {
				used[i], excused = true, true
				t.Logf("README.md:%d not run (%s): %s", c.line, n.why, c.text)
				break
			}
		}
		if excused {
			continue
		}
		if c.complex != "" {
			t.Errorf("README.md:%d: %s: %s, which this test does not run: make it a simple command or excuse it in readmeNotRun", c.line, c.text, c.complex)
			continue
		}
		argv := append([]string(nil), c.words...)
		switch argv[0] {
		case "bin/cnperf", "cnperf":
			argv[0] = bin
		default:
			p, err := exec.LookPath(argv[0])
			if err != nil {
				t.Logf("README.md:%d not run: %s is not installed (scripts/install-test-deps.sh installs it): %s", c.line, argv[0], c.text)
				continue
			}
			argv[0] = p
		}
		ran++
		runReadmeCommand(t, ns, dir, c, argv)
	}
	for i, n := range readmeNotRun {
		if !used[i] {
			t.Errorf("readmeNotRun excuses %q, which no README command starts with: remove it", n.prefix)
		}
	}
	if ran == 0 {
		t.Error("no README command ran")
	}
	t.Logf("%d README commands ran, %d in all", ran, len(cmds))
}

// runReadmeCommand runs one command in ns with dir as its working
// directory: to its end (bounded), or, in the background, until its first
// line of output says it is up (bounded) and then until the test ends.
func runReadmeCommand(t *testing.T, ns *nettest.NS, dir string, c readmeCommand, argv []string) {
	t.Helper()
	want := 0
	if m := announcedExit.FindStringSubmatch(c.comment); m != nil {
		want, _ = strconv.Atoi(m[1])
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if c.stdout != "" {
		f, err := os.Create(filepath.Join(dir, c.stdout))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.Stdout = f
	}
	if c.background {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout = pw
		if err := ns.Start(cmd); err != nil {
			t.Fatalf("README.md:%d: %s: %v", c.line, c.text, err)
		}
		pw.Close()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			pr.Close()
		})
		type first struct {
			line string
			err  error
		}
		up := make(chan first, 1)
		go func() {
			br := bufio.NewReader(pr)
			line, err := br.ReadString('\n')
			up <- first{line, err}
			_, _ = br.WriteTo(new(bytes.Buffer))
		}()
		select {
		case f := <-up:
			if f.err != nil {
				_ = cmd.Wait() // its stderr copied in full
				t.Fatalf("README.md:%d: %s: ended before saying it is up (%v)\nstderr:\n%s", c.line, c.text, f.err, errOut.String())
			}
			t.Logf("README.md:%d started: %s: %s", c.line, c.text, strings.TrimSpace(f.line))
		case <-time.After(15 * time.Second):
			t.Fatalf("README.md:%d: %s: no output within 15 s", c.line, c.text)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := ns.Start(cmd); err != nil {
		t.Fatalf("README.md:%d: %s: %v", c.line, c.text, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		err = fmt.Errorf("%w after %v", <-done, time.Minute)
	}
	code := cmd.ProcessState.ExitCode()
	t.Logf("README.md:%d exit %d in %v: %s", c.line, code, time.Since(t0).Round(time.Millisecond), c.text)
	if code != want {
		t.Errorf("README.md:%d: %s: exit %d (%v), the README announces %d\nstdout:\n%s\nstderr:\n%s", c.line, c.text, code, err, want, out.String(), errOut.String())
	}
}

// TestReadmeParse: the README test's reading of shell lines.
func TestReadmeParse(t *testing.T) {
	for _, tc := range []struct {
		in       string
		words    []string
		bg       bool
		stdout   string
		comment  string
		complete bool
	}{
		{in: `bin/cnperf probe tcp --to 127.0.0.1:5201   # two streams`, words: []string{"bin/cnperf", "probe", "tcp", "--to", "127.0.0.1:5201"}, comment: "two streams", complete: true},
		{in: `bin/cnperf respond --listen 127.0.0.1:5201 &      # serves`, words: []string{"bin/cnperf", "respond", "--listen", "127.0.0.1:5201"}, bg: true, comment: "serves", complete: true},
		{in: `echo 'a b' "c#d" > keys`, words: []string{"echo", "a b", "c#d"}, stdout: "keys", complete: true},
		{in: "bin/cnperf agent --server x \\", complete: false},
		{in: "bin/cnperf agent --server x \\\n  --pod-name a", words: []string{"bin/cnperf", "agent", "--server", "x", "--pod-name", "a"}, complete: true},
		{in: `curl -d '{"tasks":[`, complete: false},
	} {
		c, complete, err := parseCommand(tc.in)
		if err != nil || complete != tc.complete {
			t.Errorf("%q: complete %v, err %v; want complete %v", tc.in, complete, err, tc.complete)
			continue
		}
		if complete && (strings.Join(c.words, "|") != strings.Join(tc.words, "|") || c.background != tc.bg || c.stdout != tc.stdout || c.comment != tc.comment) {
			t.Errorf("%q: %q bg %v > %q # %q", tc.in, c.words, c.background, c.stdout, c.comment)
		}
	}
	if c, _, _ := parseCommand(`head -c16 /dev/urandom | xxd -p`); c.complex == "" {
		t.Error("a pipeline: not marked complex")
	}
}
