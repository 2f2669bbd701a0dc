package external

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/probe"
)

// Tool names, as the binaries are called and as task types name them.
const (
	ToolIperf3     = "iperf3"
	ToolIperf2     = "iperf" // iperf 2.x; the seed's task type "iperf"
	ToolPing       = "ping"
	ToolTraceroute = "traceroute"
)

// Tools lists the tools this package runs.
var Tools = []string{ToolIperf3, ToolIperf2, ToolPing, ToolTraceroute}

// valueKind says what a flag's value must look like.
type valueKind int

const (
	noValue   valueKind = iota
	intValue            // integer within [min, max]
	numValue            // decimal number within [min, max]
	rateValue           // bits per second with k/M/G/T suffix (probe.ParseRate)
	sizeValue           // bytes with an optional K/M/G suffix (integer mantissa)
	tosValue            // a TOS byte 0-255 (decimal or 0x hex)
	dscpValue           // a DSCP name or number 0-63
	enumValue           // one of enum
	patValue            // matches pat
)

// flagSpec is one allowed flag.
type flagSpec struct {
	names    []string // "-t", "--time"
	kind     valueKind
	min, max float64
	enum     []string
	pat      *regexp.Regexp
	// timing is the name timeouts read the value under ("time", "count"...).
	timing string
}

// forbidden names flags that would take the test out of cnperf's hands:
// the destination, ports, server mode, files, daemons. The value is the
// reason given in the error.
type forbiddenFlag struct {
	names  []string
	reason string
}

var (
	patCongestion = regexp.MustCompile(`^[a-z0-9_]{1,16}$`)
	patAffinity   = regexp.MustCompile(`^[0-9]{1,3}(,[0-9]{1,3})?$`)
	patHex        = regexp.MustCompile(`^[0-9a-fA-F]{1,32}$`)
	patSize       = regexp.MustCompile(`^[0-9]{1,12}[kKmMgG]?$`)
	patIperf2Rate = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?[kKmMgG]?(pps)?$`)
)

const (
	destReason   = "the destination comes from the task, not from task_param"
	portReason   = "the port comes from the task's target (host:port), not from task_param"
	serverReason = "server mode is run by cnperf on the destination agent, not from task_param"
	fileReason   = "reading or writing files is not allowed"
	srcReason    = "the source address comes from the task, not from task_param"
	ownedReason  = "cnperf sets this itself"
)

type toolSpec struct {
	flags     []flagSpec
	forbidden []forbiddenFlag
}

func (t *toolSpec) lookup(name string) (*flagSpec, *forbiddenFlag) {
	for i := range t.flags {
		for _, n := range t.flags[i].names {
			if n == name {
				return &t.flags[i], nil
			}
		}
	}
	for i := range t.forbidden {
		for _, n := range t.forbidden[i].names {
			if n == name {
				return nil, &t.forbidden[i]
			}
		}
	}
	return nil, nil
}

func toolSpecs(tool string) (*toolSpec, error) {
	switch tool {
	case ToolIperf3:
		return &iperf3Spec, nil
	case ToolIperf2:
		return &iperf2Spec, nil
	case ToolPing:
		return &pingSpec, nil
	case ToolTraceroute:
		return &tracerouteSpec, nil
	}
	return nil, fmt.Errorf("unknown tool %q (want one of %s)", tool, strings.Join(Tools, ", "))
}

// The allow-lists. Each is the set of flags a task_param may carry for the
// tool; everything else is refused by name.
var (
	iperf3Spec = toolSpec{
		flags: []flagSpec{
			{names: []string{"-u", "--udp"}},
			{names: []string{"-b", "--bitrate"}, kind: rateValue},
			{names: []string{"-t", "--time"}, kind: intValue, min: 1, max: 3600, timing: "time"},
			{names: []string{"-n", "--bytes"}, kind: sizeValue, timing: "bytes"},
			{names: []string{"-k", "--blockcount"}, kind: sizeValue, timing: "bytes"},
			{names: []string{"-l", "--length"}, kind: sizeValue},
			{names: []string{"-P", "--parallel"}, kind: intValue, min: 1, max: 128},
			{names: []string{"-R", "--reverse"}},
			{names: []string{"-w", "--window"}, kind: sizeValue},
			{names: []string{"-M", "--set-mss"}, kind: intValue, min: 88, max: 9216},
			{names: []string{"-N", "--no-delay"}},
			{names: []string{"-4", "--version4"}},
			{names: []string{"-6", "--version6"}},
			{names: []string{"-S", "--tos"}, kind: tosValue},
			{names: []string{"--dscp"}, kind: dscpValue},
			{names: []string{"-Z", "--zerocopy"}},
			{names: []string{"-O", "--omit"}, kind: intValue, min: 0, max: 600, timing: "omit"},
			{names: []string{"-C", "--congestion"}, kind: patValue, pat: patCongestion},
			{names: []string{"-i", "--interval"}, kind: numValue, min: 0, max: 60},
			{names: []string{"-A", "--affinity"}, kind: patValue, pat: patAffinity},
			{names: []string{"-f", "--format"}, kind: enumValue, enum: []string{"k", "m", "g", "t", "K", "M", "G", "T"}},
			{names: []string{"-L", "--flowlabel"}, kind: intValue, min: 0, max: 1048575},
			{names: []string{"--get-server-output"}},
			{names: []string{"--udp-counters-64bit"}},
			{names: []string{"--repeating-payload"}},
			{names: []string{"--fq-rate"}, kind: rateValue},
			{names: []string{"--pacing-timer"}, kind: intValue, min: 1, max: 1000000},
			{names: []string{"--connect-timeout"}, kind: intValue, min: 1, max: 60000},
		},
		forbidden: []forbiddenFlag{
			{[]string{"-c", "--client"}, destReason},
			{[]string{"-p", "--port", "--cport"}, portReason},
			{[]string{"-s", "--server", "-1", "--one-off", "-D", "--daemon"}, serverReason},
			{[]string{"-B", "--bind", "--bind-dev"}, srcReason},
			{[]string{"--logfile", "-I", "--pidfile", "-F", "--file", "--rsa-public-key-path",
				"--rsa-private-key-path", "--authorized-users-path"}, fileReason},
			{[]string{"-J", "--json", "--json-stream"}, ownedReason},
			{[]string{"--bidir"}, "bidirectional tests are not supported; run two tasks"},
		},
	}

	iperf2Spec = toolSpec{
		flags: []flagSpec{
			{names: []string{"-u", "--udp"}},
			{names: []string{"-b", "--bandwidth"}, kind: patValue, pat: patIperf2Rate},
			{names: []string{"-t", "--time"}, kind: numValue, min: 0.1, max: 3600, timing: "time"},
			{names: []string{"-n", "--num"}, kind: sizeValue, timing: "bytes"},
			{names: []string{"-i", "--interval"}, kind: numValue, min: 0.0001, max: 60},
			{names: []string{"-l", "--len"}, kind: sizeValue},
			{names: []string{"-P", "--parallel"}, kind: intValue, min: 1, max: 1},
			{names: []string{"-w", "--window"}, kind: sizeValue},
			{names: []string{"-M", "--mss"}, kind: intValue, min: 88, max: 9216},
			{names: []string{"-N", "--nodelay"}},
			{names: []string{"-S", "--tos"}, kind: tosValue},
			{names: []string{"-T", "--ttl"}, kind: intValue, min: 1, max: 255},
			{names: []string{"-Z", "--tcp-congestion"}, kind: patValue, pat: patCongestion},
			{names: []string{"-f", "--format"}, kind: enumValue, enum: []string{"b", "k", "m", "g", "B", "K", "M", "G"}},
			{names: []string{"-V", "--ipv6_domain"}},
			{names: []string{"--trip-times"}},
			{names: []string{"-e", "--enhanced"}},
		},
		forbidden: []forbiddenFlag{
			{[]string{"-c", "--client"}, destReason},
			{[]string{"-p", "--port", "-L", "--listenport"}, portReason},
			{[]string{"-s", "--server", "-D", "--daemon"}, serverReason},
			{[]string{"-d", "--dualtest", "-r", "--tradeoff", "--full-duplex", "-R", "--reverse"},
				"tests that need the server to connect back are not supported"},
			{[]string{"-B", "--bind"}, srcReason},
			{[]string{"-o", "--output", "-F", "--fileinput", "-I", "--stdin"}, fileReason},
			{[]string{"-y", "--reportstyle", "-x", "--reportexclude"}, "cnperf reads iperf2's enhanced text output; report styles are fixed"},
		},
	}

	pingSpec = toolSpec{
		flags: []flagSpec{
			{names: []string{"-c"}, kind: intValue, min: 1, max: 100000, timing: "count"},
			{names: []string{"-i"}, kind: numValue, min: 0.002, max: 60, timing: "interval"},
			{names: []string{"-s"}, kind: intValue, min: 16, max: 65507},
			{names: []string{"-t"}, kind: intValue, min: 1, max: 255},
			{names: []string{"-Q"}, kind: tosValue},
			{names: []string{"-W"}, kind: numValue, min: 0.001, max: 60, timing: "wait"},
			{names: []string{"-w"}, kind: intValue, min: 1, max: 3600, timing: "deadline"},
			{names: []string{"-l"}, kind: intValue, min: 1, max: 3},
			{names: []string{"-M"}, kind: enumValue, enum: []string{"do", "want", "dont", "probe"}},
			{names: []string{"-p"}, kind: patValue, pat: patHex},
			{names: []string{"-4"}},
			{names: []string{"-6"}},
			{names: []string{"-A"}},
			{names: []string{"-U"}},
			{names: []string{"-n"}},
		},
		forbidden: []forbiddenFlag{
			{[]string{"-I"}, srcReason},
			{[]string{"-f", "-b"}, "flood and broadcast pings are not allowed"},
			{[]string{"-q", "-D", "-O", "-a", "-v", "-R"}, "cnperf reads ping's per-reply lines; this flag changes or hides them"},
		},
	}

	tracerouteSpec = toolSpec{
		flags: []flagSpec{
			{names: []string{"-I", "--icmp"}},
			{names: []string{"-T", "--tcp"}},
			{names: []string{"-U", "--udp"}},
			{names: []string{"-m", "--max-hops"}, kind: intValue, min: 1, max: 64, timing: "maxttl"},
			{names: []string{"-f", "--first"}, kind: intValue, min: 1, max: 64},
			{names: []string{"-q", "--queries"}, kind: intValue, min: 1, max: 10, timing: "queries"},
			{names: []string{"-w", "--wait"}, kind: numValue, min: 0.01, max: 60, timing: "wait"},
			{names: []string{"-z", "--sendwait"}, kind: numValue, min: 0, max: 10, timing: "sendwait"},
			{names: []string{"-N", "--sim-queries"}, kind: intValue, min: 1, max: 64, timing: "simqueries"},
			{names: []string{"-p", "--port"}, kind: intValue, min: 1, max: 65535},
			{names: []string{"-t", "--tos"}, kind: tosValue},
			{names: []string{"-F", "--dont-fragment"}},
			{names: []string{"-4"}},
			{names: []string{"-6"}},
			{names: []string{"-n"}},
		},
		forbidden: []forbiddenFlag{
			{[]string{"-s", "--source", "-i", "--interface"}, srcReason},
			{[]string{"-g", "--gateway"}, "source routing is not allowed"},
			{[]string{"-A", "--as-path-lookups"}, "AS lookups query an outside server"},
			{[]string{"-M", "--module", "-O", "--options", "-e", "--extensions", "-V", "--version", "--mtu", "--back"},
				"this flag changes traceroute's output format or method beyond what cnperf parses"},
		},
	}
)

// shellMeta are characters a shell would interpret. Nothing here ever goes
// through a shell, but a task_param holding one is a mistake or an attack,
// so it is refused with a clear message.
const shellMeta = ";|&$`><()'\"\\\n\r*?[]{}~!#"

// ParseParam splits a task_param string into arguments by whitespace (no
// shell, no quoting), and checks each against tool's allow-list: the flag
// must be known, a flag that takes a value must have one of the right form
// (written as "-t 10", "--time 10" or "--time=10"; "-t10" is refused), and
// flags that set the destination, port, source, server mode or files are
// refused with the reason. The returned list is what the tool will get, in
// the same order (a DSCP name is turned into its number).
func ParseParam(tool, param string) ([]string, error) {
	spec, err := toolSpecs(tool)
	if err != nil {
		return nil, err
	}
	for _, r := range param {
		if strings.ContainsRune(shellMeta, r) {
			return nil, fmt.Errorf("%s task_param: shell metacharacter %q not allowed", tool, r)
		}
		if r == ' ' || r == '\t' {
			continue
		}
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".,=_-", r)) {
			return nil, fmt.Errorf("%s task_param: character %q not allowed", tool, r)
		}
	}
	tokens := strings.FieldsFunc(param, func(r rune) bool { return r == ' ' || r == '\t' })
	out := make([]string, 0, len(tokens))
	for i := 0; i < len(tokens); i++ {
		tok := tokens[i]
		if !strings.HasPrefix(tok, "-") || tok == "-" || tok == "--" {
			return nil, fmt.Errorf("%s task_param: unexpected argument %q (only flags are allowed; %s)", tool, tok, destReason)
		}
		name, val, hasEq := tok, "", false
		if strings.HasPrefix(tok, "--") {
			if k, v, ok := strings.Cut(tok, "="); ok {
				name, val, hasEq = k, v, true
			}
		}
		fs, forb := spec.lookup(name)
		if forb != nil {
			return nil, fmt.Errorf("%s task_param: flag %s not allowed: %s", tool, name, forb.reason)
		}
		if fs == nil {
			if !strings.HasPrefix(name, "--") && len(name) > 2 {
				if f, _ := spec.lookup(name[:2]); f != nil {
					return nil, fmt.Errorf("%s task_param: flag %s not allowed: write each flag and each value apart (e.g. \"%s %s\")", tool, name, name[:2], name[2:])
				}
			}
			return nil, fmt.Errorf("%s task_param: flag %s not allowed (not in cnperf's allow-list for %s)", tool, name, tool)
		}
		if fs.kind == noValue {
			if hasEq {
				return nil, fmt.Errorf("%s task_param: flag %s takes no value", tool, name)
			}
			out = append(out, name)
			continue
		}
		if !hasEq {
			if i+1 >= len(tokens) {
				return nil, fmt.Errorf("%s task_param: flag %s needs a value", tool, name)
			}
			i++
			val = tokens[i]
		}
		norm, err := checkValue(fs, val)
		if err != nil {
			return nil, fmt.Errorf("%s task_param: flag %s: %w", tool, name, err)
		}
		out = append(out, name, norm)
	}
	return out, nil
}

// checkValue validates v for fs and returns it as the tool will get it.
func checkValue(fs *flagSpec, v string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("empty value")
	}
	switch fs.kind {
	case intValue:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "", fmt.Errorf("value %q is not an integer", v)
		}
		if float64(n) < fs.min || float64(n) > fs.max {
			return "", fmt.Errorf("value %d out of range %g-%g", n, fs.min, fs.max)
		}
	case numValue:
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || strings.ContainsAny(v, "xXeEnN") {
			return "", fmt.Errorf("value %q is not a decimal number", v)
		}
		if f < fs.min || f > fs.max {
			return "", fmt.Errorf("value %s out of range %g-%g", v, fs.min, fs.max)
		}
	case rateValue:
		if _, err := probe.ParseRate(v); err != nil || strings.ContainsAny(v, "/ ") {
			return "", fmt.Errorf("value %q is not a rate (a number with an optional k, M, G suffix)", v)
		}
	case sizeValue:
		if !patSize.MatchString(v) {
			return "", fmt.Errorf("value %q is not a size (an integer with an optional K, M, G suffix)", v)
		}
	case tosValue:
		n, err := probe.ParseTOS(v)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(n), nil
	case dscpValue:
		n, err := probe.ParseDSCP(v)
		if err != nil {
			return "", err
		}
		return strconv.Itoa(n), nil
	case enumValue:
		for _, e := range fs.enum {
			if v == e {
				return v, nil
			}
		}
		return "", fmt.Errorf("value %q not one of %s", v, strings.Join(fs.enum, ", "))
	case patValue:
		if !fs.pat.MatchString(v) {
			return "", fmt.Errorf("value %q not allowed (want %s)", v, fs.pat)
		}
	}
	return v, nil
}

// timingValues reads the flags that bound a run's duration from validated
// args, by their timing names.
func timingValues(tool string, args []string) map[string]float64 {
	spec, err := toolSpecs(tool)
	if err != nil {
		return nil
	}
	m := map[string]float64{}
	for i := 0; i < len(args); i++ {
		fs, _ := spec.lookup(args[i])
		if fs == nil || fs.kind == noValue {
			continue
		}
		if i+1 < len(args) && fs.timing != "" {
			if f, err := strconv.ParseFloat(args[i+1], 64); err == nil {
				m[fs.timing] = f
			} else {
				m[fs.timing] = -1 // present, not a plain number (a size)
			}
		}
		i++
	}
	return m
}

// hasFlag reports whether args (validated) hold any of names.
func hasFlag(args []string, names ...string) bool {
	for _, a := range args {
		for _, n := range names {
			if a == n {
				return true
			}
		}
	}
	return false
}
