package cniqos

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cnperf/cnperf/internal/suite"
)

// Verdicts, per feature and datapath mode.
const (
	Works    = "works"
	Caveat   = "works with a caveat"
	NoEffect = "no effect"
	Untried  = "cannot be tried here"
	None     = "none"
)

// Tolerance is how far a held limit may be from what was asked for once
// the flow conforms (10 %).
const Tolerance = 0.10

// Tryable says whether f can be tried in the environment caps describes
// and, when not, why: the CNI release, the nodes' kernel (release and
// traffic-control features, as detected), or a way of asking for it
// that the environment lacks.
func Tryable(f Feature, caps suite.Caps) (bool, string) {
	if f.Class == ClassNone {
		return false, f.Promise
	}
	if f.Class == ClassTunnelMark && caps.Encap != suite.EncapVXLAN {
		return false, "no tunnel between the nodes in this mode: a pod's mark travels in the packet's own header"
	}
	if f.From == "" {
		return false, fmt.Sprintf("no %s release has it yet (%s)", f.CNI, f.Ref)
	}
	if v := caps.CNI.Version; v != "" && versionLess(v, f.From) {
		return false, fmt.Sprintf("%s %s is older than %s, the first release with it", f.CNI, v, f.From)
	}
	var lacks []string
	for _, need := range f.NeedsKernel {
		why, tried := caps.KernelTC[need]
		switch {
		case !tried:
			lacks = append(lacks, fmt.Sprintf("the nodes' kernels were not tried for %s", need))
		case why != "":
			lacks = append(lacks, fmt.Sprintf("the nodes' kernel lacks %s: %s", need, why))
		}
	}
	if f.MinKernel != "" && caps.CNI.Kernel != "" && versionLess(caps.CNI.Kernel, f.MinKernel) {
		lacks = append(lacks, fmt.Sprintf("kernel %s is older than %s", caps.CNI.Kernel, f.MinKernel))
	}
	if len(lacks) > 0 {
		return false, strings.Join(lacks, "; ")
	}
	switch f.Via {
	case ViaResource:
		return false, fmt.Sprintf("cnperf does not create %s objects yet", f.Resource)
	case ViaAnnotation:
		if !caps.Has(suite.CapPodAnnotate) {
			return false, caps.Reason(suite.CapPodAnnotate)
		}
	}
	return true, ""
}

// versionLess compares dotted releases ("v3.30.1", "6.18.44-fc"): the
// numbers up to the first non-digit of each part.
func versionLess(a, b string) bool {
	pa, pb := versionParts(a), versionParts(b)
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func versionParts(v string) []int {
	v = strings.TrimPrefix(v, "v")
	var out []int
	for _, p := range strings.SplitN(v, ".", 3) {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		n, _ := strconv.Atoi(p[:end])
		out = append(out, n)
		if end < len(p) {
			break
		}
	}
	return out
}

// A Judgement is a feature's verdict with the figure or reason behind it.
type Judgement struct {
	Verdict string
	Why     string
}

// Bandwidth judges a limit of limitBps from a receiver's steady rate once
// conformed (conformS nil: never) and its first 100 ms: held within
// Tolerance works; held after an overshoot works with that caveat; a
// steady rate above 1.5 times the limit is no effect. by names what made
// the limit on the pod's interfaces as read back ("" none found).
func Bandwidth(limitBps, firstBps, steadyBps float64, conformS *float64, by string) Judgement {
	mbit := func(v float64) string { return fmt.Sprintf("%.1f Mbit/s", v/1e6) }
	switch {
	case steadyBps > 1.5*limitBps:
		where := "no limit found on the pod's interfaces"
		if by != "" {
			where = "a limit was made (by " + by + ") but the flow did not pass through it"
		}
		return Judgement{NoEffect, fmt.Sprintf("%s steady against %s asked; %s", mbit(steadyBps), mbit(limitBps), where)}
	case conformS == nil || steadyBps > (1+Tolerance)*limitBps:
		return Judgement{Caveat, fmt.Sprintf("%s steady, %+.0f %% from %s asked, not within %.0f %%", mbit(steadyBps), 100*(steadyBps/limitBps-1), mbit(limitBps), 100*Tolerance)}
	case steadyBps < (1-Tolerance)*limitBps:
		return Judgement{Caveat, fmt.Sprintf("held below the limit: %s steady, %+.0f %% from %s", mbit(steadyBps), 100*(steadyBps/limitBps-1), mbit(limitBps))}
	case firstBps > (1+Tolerance)*limitBps:
		return Judgement{Caveat, fmt.Sprintf("held at %s (%+.1f %%) after %.1f s; the first 100 ms at %s (%+.0f %%: the burst)",
			mbit(steadyBps), 100*(steadyBps/limitBps-1), *conformS, mbit(firstBps), 100*(firstBps/limitBps-1))}
	}
	return Judgement{Works, fmt.Sprintf("held at %s (%+.1f %%) from the start", mbit(steadyBps), 100*(steadyBps/limitBps-1))}
}

// PacketRate judges a limit of limitPPS from the packets per second that
// arrived of offeredPPS sent (as the sender counted them): a flood under
// twice the limit cannot show it.
func PacketRate(limitPPS, offeredPPS, receivedPPS float64) Judgement {
	switch {
	case offeredPPS < 2*limitPPS && receivedPPS <= (1+Tolerance)*limitPPS:
		return Judgement{Caveat, fmt.Sprintf("the flood sent only %.0f packets/s, too few to test %.0f asked (%.0f arrived)", offeredPPS, limitPPS, receivedPPS)}
	case receivedPPS <= 0:
		return Judgement{NoEffect, fmt.Sprintf("nothing arrived of %.0f packets/s offered", offeredPPS)}
	case receivedPPS > 2*limitPPS:
		return Judgement{NoEffect, fmt.Sprintf("%.0f packets/s arrived of %.0f offered against %.0f asked: not limited", receivedPPS, offeredPPS, limitPPS)}
	case receivedPPS > (1+Tolerance)*limitPPS:
		return Judgement{Caveat, fmt.Sprintf("%.0f packets/s arrived against %.0f asked (%+.0f %%)", receivedPPS, limitPPS, 100*(receivedPPS/limitPPS-1))}
	case receivedPPS < (1-Tolerance)*limitPPS:
		return Judgement{Caveat, fmt.Sprintf("held below the limit: %.0f packets/s arrived against %.0f asked (%+.0f %%)", receivedPPS, limitPPS, 100*(receivedPPS/limitPPS-1))}
	}
	return Judgement{Works, fmt.Sprintf("held at %.0f packets/s (%+.1f %%, within %.0f %%) of %.0f offered", receivedPPS, 100*(receivedPPS/limitPPS-1), 100*Tolerance, offeredPPS)}
}

// ConnSlack is how many connections a held connection limit may be off
// by: the pod's own (its agent's to the server) may count against it.
const ConnSlack = 2

// Connections judges a limit of limit connections open at once from
// attempts connects held open together: held were open at once after
// the last attempt, refused were reset (as a connlimit rejects), timedOut
// were dropped. At most limit+ConnSlack held and at least limit-ConnSlack
// works; every attempt held is no effect.
func Connections(limit float64, attempts, held, refused, timedOut int) Judgement {
	figure := fmt.Sprintf("%d of %d connections open at once against %.0f asked (%d reset, %d timed out)", held, attempts, limit, refused, timedOut)
	switch {
	case held >= attempts && float64(held) > limit+ConnSlack:
		return Judgement{NoEffect, figure + ": not limited"}
	case float64(held) > limit+ConnSlack:
		return Judgement{Caveat, figure + fmt.Sprintf(": more than the limit and its slack of %d", ConnSlack)}
	case float64(held) < limit-ConnSlack:
		return Judgement{Caveat, "held below the limit: " + figure}
	}
	return Judgement{Works, fmt.Sprintf("held within %d: %s", ConnSlack, figure)}
}

// DSCP judges a mark that should reach an address leaving the cluster
// (leaving: the code point on arrival there, nil when not measured) and
// is not promised towards pods (podToPod: the same for a pod's address).
func DSCP(want int, leaving, podToPod *int) Judgement {
	pod := "pod to pod not measured"
	if podToPod != nil {
		pod = fmt.Sprintf("pod to pod it arrived as %d", *podToPod)
		if *podToPod == 0 {
			pod += " (unmarked)"
		}
	}
	switch {
	case leaving == nil:
		return Judgement{NoEffect, "no traffic to the underlay address arrived (" + pod + ")"}
	case *leaving != want:
		return Judgement{NoEffect, fmt.Sprintf("arrived at the underlay address as %d, not %d: the mark was not made or was lost on the way; %s", *leaving, want, pod)}
	}
	return Judgement{Works, fmt.Sprintf("arrived at the underlay address as %d; %s", *leaving, pod)}
}

// Priority judges a priority from the median request/response latency
// while another pod floods the same path, with the priority (prioMs) and
// without (plainMs): at most half works, lower works with a caveat.
func Priority(plainMs, prioMs float64) Judgement {
	switch {
	case plainMs <= 0 || prioMs <= 0:
		return Judgement{NoEffect, "no latency measured"}
	case prioMs <= plainMs/2:
		return Judgement{Works, fmt.Sprintf("%.2f ms under the flood with the priority, %.2f ms without", prioMs, plainMs)}
	case prioMs < plainMs*(1-Tolerance):
		return Judgement{Caveat, fmt.Sprintf("only %.0f %% lower: %.2f ms with the priority, %.2f ms without", 100*(1-prioMs/plainMs), prioMs, plainMs)}
	}
	return Judgement{NoEffect, fmt.Sprintf("%.2f ms under the flood with the priority, %.2f ms without", prioMs, plainMs)}
}
