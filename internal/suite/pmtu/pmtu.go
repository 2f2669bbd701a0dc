// Package pmtu is the suite of the path MTU and its black holes: per path
// (pod-pod same node, cross node, node-node) a DF size sweep, a few echo
// requests of each IP packet size with DF set. The largest size answered
// is the path MTU as it works; a size that fits the sender's interface
// but vanishes without the kernel learning a smaller MTU (no ICMP
// "fragmentation needed" came back, so later sends are not refused) is a
// black hole, the overlay misconfiguration that stalls large transfers
// while pings and small requests work.
package pmtu

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// SuiteName is the suite's name.
const SuiteName = "pmtu"

// Row figures.
const (
	FigPathMTU       = "path_mtu"        // largest IP packet size answered with DF
	FigRefusedFrom   = "refused_from"    // smallest size the sender's kernel refused as too big
	FigBlackHole     = "black_hole"      // 1: a size sent without refusal vanished
	FigBlackHoleSize = "black_hole_size" // the smallest such size
	FigSizes         = "sizes"           // sizes tried
)

// labelSize is an IP packet size of a step; labelGroup keeps the rows of
// paths and backends apart while they are aggregated.
const (
	labelSize  = "ip_size"
	labelGroup = "pmtu_path"
)

// ipHeader is the IPv4 and ICMP header an echo's payload rides in.
const (
	ipv4Header = 20 + 8
	ipv6Header = 40 + 8
)

// Options tune the sweep.
type Options struct {
	// Sizes are the IP packet sizes tried (default DefaultSizes plus the
	// environment's pod MTU).
	Sizes []int
	// Count is the echoes per size (default 3).
	Count int
	Paths []string
}

// DefaultSizes are the sizes swept by default: the IPv6 minimum, the
// usual overlay MTUs (VXLAN, IPIP, WireGuard below 1500), Ethernet's 1500
// and jumbo frames.
var DefaultSizes = []int{1280, 1400, 1420, 1450, 1480, 1500, 4000, 9000}

var pathNames = map[string]string{"same-node": suite.PodPodSameNode, "cross-node": suite.PodPodCrossNode, "node-node": suite.NodeNode}

// Settings is the table of the suite's settings, reading into po.
func Settings(po *Options) suite.Settings {
	return suite.Settings{
		{Key: suite.Key{Name: "sizes", Unit: "list of IP packet sizes (bytes)", Default: "1280 to 9000 and the pod MTU", Meaning: "the sizes sent with DF, a few echoes each"},
			Set: func(v string) error {
				po.Sizes = nil
				for _, x := range suite.SplitList(v) {
					n, err := strconv.Atoi(x)
					if err != nil || n < 68 || n > 65535 {
						return fmt.Errorf("size %q: want an IP packet size of 68-65535 bytes", x)
					}
					po.Sizes = append(po.Sizes, n)
				}
				return nil
			}},
		{Key: suite.Key{Name: "count", Unit: "count", Default: "3", Meaning: "echo requests per size"},
			Set: func(v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 || n > 100 {
					return fmt.Errorf("want 1-100")
				}
				po.Count = n
				return nil
			}},
		{Key: suite.Key{Name: "paths", Unit: "list of same-node, cross-node, node-node", Default: "all three", Meaning: "the paths swept"},
			Set: func(v string) error {
				po.Paths = nil
				for _, x := range suite.SplitList(v) {
					c, ok := pathNames[x]
					if !ok {
						return fmt.Errorf("path %q: want same-node, cross-node or node-node", x)
					}
					po.Paths = append(po.Paths, c)
				}
				return nil
			}},
	}
}

// Suite is the DF size sweep.
type Suite struct{}

// Name implements suite.Suite.
func (Suite) Name() string { return SuiteName }

// Describe implements suite.Suite.
func (Suite) Describe() string {
	return "path MTU per path and black holes: echo requests of each size with DF set (a DF size sweep)"
}

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return Settings(&Options{}).Keys() }

// OptionsFrom reads the settings.
func OptionsFrom(o suite.Options) (Options, error) {
	po := Options{Count: 3}
	if err := Settings(&po).Apply(SuiteName, o); err != nil {
		return po, err
	}
	return po, nil
}

// CheckOptions implements suite.OptionsChecker.
func (Suite) CheckOptions(o suite.Options) error {
	_, err := OptionsFrom(o)
	return err
}

// Plan implements suite.Suite: one phase, a ping step per path and size
// (repeated o.Repeat times), echoes 100 ms apart.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	po, err := OptionsFrom(o)
	if err != nil {
		return nil, err
	}
	sizes := po.Sizes
	if len(sizes) == 0 {
		sizes = slices.Clone(DefaultSizes)
		if caps.PathMTU > 0 && !slices.Contains(sizes, caps.PathMTU) {
			sizes = append(sizes, caps.PathMTU)
		}
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	pairs, err := suite.PickPairs(agents)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", SuiteName, err)
	}
	paths := po.Paths
	if len(paths) == 0 {
		paths = []string{suite.PodPodSameNode, suite.PodPodCrossNode, suite.NodeNode}
	}
	var steps []suite.Step
	for rep := 0; rep < max(o.Repeat, 1); rep++ {
		for _, conn := range paths {
			p, ok := pairs[conn]
			if !ok {
				if len(po.Paths) > 0 {
					return nil, fmt.Errorf("suite %s: no agents for the path %s", SuiteName, conn)
				}
				continue
			}
			hdr := ipv4Header
			if isV6(p.Dst.IP) {
				hdr = ipv6Header
			}
			for _, size := range sizes {
				if size <= hdr {
					continue
				}
				steps = append(steps, suite.Step{Connection: conn, Backend: o.Backend, Measure: suite.MeasurePing, Repeat: rep,
					Src: p.Src, Dst: p.Dst, Labels: map[string]string{labelSize: strconv.Itoa(size)},
					Spec: probe.Spec{Kind: probe.KindPing, Target: p.Dst.IP, Count: po.Count, Size: size - hdr,
						Interval: probe.Duration(100 * time.Millisecond), Timeout: probe.Duration(time.Second), DontFragment: true}})
			}
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("suite %s: no path to sweep among %d agents", SuiteName, len(agents))
	}
	return []suite.Phase{{Name: "pmtu sweep", Steps: steps}}, nil
}

func isV6(ip string) bool {
	for _, c := range ip {
		if c == ':' {
			return true
		}
	}
	return false
}

// sizeResult is what one size did on one path in one repetition.
type sizeResult struct {
	size               int
	answered, refused  bool
	sentWithoutRefusal bool
}

// Rows implements suite.Suite: a row per path (and backend) with the
// largest size answered, the smallest refused, and any black hole, the
// repetitions' figures aggregated as every suite's are.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	type key struct {
		conn, backend string
		rep           int
	}
	var order []key
	first := map[key]suite.Step{}
	by := map[key][]sizeResult{}
	errs := map[key][]string{}
	for _, o := range outcomes {
		size, err := strconv.Atoi(o.Step.Labels[labelSize])
		if err != nil {
			continue
		}
		k := key{o.Step.Connection, o.Step.Backend, o.Step.Repeat}
		if _, ok := by[k]; !ok {
			order = append(order, k)
			by[k] = nil
			first[k] = o.Step
		}
		if o.Result == nil || o.Result.Packets == nil {
			errs[k] = append(errs[k], fmt.Sprintf("%d B: %s", size, o.Err))
			continue
		}
		pk := o.Result.Packets
		by[k] = append(by[k], sizeResult{size: size, answered: pk.Received > 0, refused: pk.TooBig > 0,
			sentWithoutRefusal: pk.Sent > pk.TooBig})
	}
	var outs []suite.Outcome
	figs := map[key]map[string]float64{}
	for _, k := range order {
		figs[k] = Judge(by[k])
		outs = append(outs, suite.Outcome{Step: suite.Step{Connection: k.conn, Backend: k.backend, Repeat: k.rep, Src: first[k].Src, Dst: first[k].Dst,
			Measure: "pmtu", Labels: map[string]string{labelGroup: k.conn + "\x00" + k.backend}}, Result: &probe.Result{Kind: "pmtu"}})
	}
	rows := suite.LabelRows(outs, []string{labelGroup}, func(o suite.Outcome) (map[string]float64, map[string][]float64) {
		return figs[key{o.Step.Connection, o.Step.Backend, o.Step.Repeat}], nil
	})
	for i := range rows {
		delete(rows[i].Labels, labelGroup) // it only kept the paths apart
		for _, k := range order {
			if k.conn == rows[i].Connection && k.backend == rows[i].Backend {
				rows[i].Errors = append(rows[i].Errors, errs[k]...)
			}
		}
	}
	return rows
}

// Judge reads one path's sweep: the largest size answered (path_mtu), the
// smallest refused as too big (refused_from), and a black hole: a size
// above the path MTU that was sent (not refused) and never answered,
// while the kernel refused no size up to it.
func Judge(results []sizeResult) map[string]float64 {
	slices.SortFunc(results, func(a, b sizeResult) int { return a.size - b.size })
	out := map[string]float64{FigSizes: float64(len(results))}
	pathMTU, refusedFrom := 0, 0
	for _, r := range results {
		if r.answered {
			pathMTU = max(pathMTU, r.size)
		}
		if r.refused && (refusedFrom == 0 || r.size < refusedFrom) {
			refusedFrom = r.size
		}
	}
	if pathMTU > 0 {
		out[FigPathMTU] = float64(pathMTU)
	}
	if refusedFrom > 0 {
		out[FigRefusedFrom] = float64(refusedFrom)
	}
	out[FigBlackHole] = 0
	for _, r := range results {
		if r.size <= pathMTU || r.answered || !r.sentWithoutRefusal || r.refused {
			continue
		}
		if refusedFrom == 0 || r.size < refusedFrom {
			out[FigBlackHole] = 1
			out[FigBlackHoleSize] = float64(r.size)
			break
		}
	}
	return out
}

// RowMetrics implements suite.MetricLister.
func (Suite) RowMetrics() []string {
	return []string{FigPathMTU, FigRefusedFrom, FigBlackHole, FigBlackHoleSize, FigSizes}
}

// Presentation implements suite.Presenter: a line per path.
func (Suite) Presentation() suite.Presentation {
	return suite.Presentation{Tables: []suite.Table{{Columns: []suite.Column{
		{Head: "backend", Field: suite.FieldBackend, Varying: true},
		{Head: "connection", Field: suite.FieldConnection},
		{Head: "src -> dst", Field: suite.FieldPath},
		{Head: "path MTU B", Metric: FigPathMTU, Format: "%.0f"},
		{Head: "refused from B", Metric: FigRefusedFrom, Format: "%.0f", Missing: "none"},
		{Head: "black hole", Metric: FigBlackHole, Words: []string{"no", "yes"}},
		{Head: "black hole at B", Metric: FigBlackHoleSize, Format: "%.0f", Optional: true},
		{Head: "sizes", Metric: FigSizes, Format: "%.0f"},
	}}}}
}
