package cniqos

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/shaping"
)

// Suite tries the QoS features of the cluster's own CNI (Table), one
// phase each: a pod standing in for a test pod with the feature's
// annotations (removed after the phase, also when it fails), the flows
// that measure what it promises, and a verdict per feature. Features
// that cannot be tried here get a row saying why, carried by a short
// ping between the pair.
type Suite struct{}

// Name implements suite.Suite.
func (Suite) Name() string { return "cni-qos" }

// Describe implements suite.Suite.
func (Suite) Describe() string {
	return "the CNI's own QoS features (annotations), applied to a test pod and judged: works, caveat, no effect, or cannot be tried here"
}

// MayUse implements suite.CapUser: annotated pods, and the detection of
// the nodes' traffic-control features that comes with it.
func (Suite) MayUse() []suite.Cap { return []suite.Cap{suite.CapPodAnnotate} }

// Row labels.
const (
	LabelFeature = "feature"
	LabelClass   = "kind"
	LabelVerdict = "verdict"
	LabelWhy     = "why"
	LabelSet     = "annotations"
	labelRole    = "role"
	labelValue   = "value"
	labelOffered = "offered_pps"
	labelMTU     = "mtu"
)

// Roles of a step within a feature's phase.
const (
	roleFlow    = "flow"    // the measured flow (bandwidth, packet rate, connections)
	roleLeaving = "leaving" // to an address of the underlay (DSCP)
	rolePod     = "pod"     // to a pod (DSCP)
	rolePlain   = "plain"   // latency under a flood, no priority
	rolePrio    = "prio"    // latency under a flood, with the priority
	roleFlood   = "flood"   // the flood beside it
	roleNote    = "note"    // carries an untried feature's row
)

// NotMeasured is a row whose flow failed: no verdict.
const NotMeasured = "not measured"

const (
	interval   = 100 * time.Millisecond
	offeredPPS = 20 * packetRateLimit
	ppsSize    = 64 // UDP payload of the packet-rate flood
)

// Keys implements suite.Keyed.
func (Suite) Keys() []suite.Key { return settings(new([]string)).Keys() }

func settings(only *[]string) suite.Settings {
	return suite.Settings{
		{Key: suite.Key{Name: "features", Unit: "list of feature names", Default: "all of the CNI's",
			Meaning: "the CNI's features to try (names as the rows show them)"}, Set: suite.SetList(only)},
	}
}

// Plan implements suite.Suite.
func (s Suite) Plan(agents []suite.Endpoint, o suite.Options, caps suite.Caps) ([]suite.Phase, error) {
	var only []string
	if err := settings(&only).Apply(s.Name(), o); err != nil {
		return nil, err
	}
	if caps.CNI.Name == "" {
		return nil, fmt.Errorf("suite %s: the network's CNI is not known here: it tries a cluster CNI's own QoS (run it with --k8s): %s", s.Name(), caps.Reason(suite.CapPodAnnotate))
	}
	feats := For(caps.CNI.Name)
	if len(feats) == 0 {
		return nil, fmt.Errorf("suite %s: no QoS features of CNI %q are known (the table has %s)", s.Name(), caps.CNI.Name, strings.Join(CNIs(), ", "))
	}
	if len(only) > 0 {
		var picked []Feature
		for _, name := range only {
			i := slices.IndexFunc(feats, func(f Feature) bool { return f.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("suite %s: --set features: %s has no feature %q", s.Name(), caps.CNI.Name, name)
			}
			picked = append(picked, feats[i])
		}
		feats = picked
	}
	ends, err := pickEnds(agents)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", s.Name(), err)
	}
	mtu := caps.PathMTU
	if mtu == 0 {
		mtu = 1500
	}
	var phases []suite.Phase
	notes := suite.Phase{Name: s.Name() + ": features not tried"}
	for _, f := range feats {
		ok, why := Tryable(f, caps)
		if ok && f.Class == ClassDSCP && ends.host == nil {
			ok, why = false, fmt.Sprintf("no host-network agent on %s to receive on the underlay (deploy with --host-agents)", ends.dst.Node)
		}
		if ok && f.Class == ClassTunnelMark && !hostOn(agents, ends.src.Node, ends.dst.Node) {
			ok, why = false, fmt.Sprintf("no host-network agents on %s and %s to watch the nodes' wire (deploy with --host-agents)", ends.src.Node, ends.dst.Node)
		}
		if ok && f.Class == ClassPriority && ends.flooder == nil {
			ok, why = false, fmt.Sprintf("no second pod agent on %s to flood beside the prioritised pod", ends.src.Node)
		}
		if !ok {
			verdict := Untried
			if f.Class == ClassNone {
				verdict = None
			}
			st := step(f, o.Backend, roleNote, ends.src, ends.dst,
				probe.Spec{Kind: probe.KindPing, Target: ends.dst.IP, Count: 3, Interval: probe.Duration(200 * time.Millisecond)})
			st.Labels[LabelVerdict], st.Labels[LabelWhy] = verdict, why
			notes.Steps = append(notes.Steps, st)
			continue
		}
		switch f.Class {
		case ClassTunnelMark:
			ph, ns := tunnelMarkPhases(s.Name(), f, o, ends, agents, caps)
			phases, notes.Steps = append(phases, ph...), append(notes.Steps, ns...)
		case ClassDSCP:
			for _, ph := range featurePhases(s.Name(), f, o, ends, mtu) {
				phases = append(phases, watchDSCP(ph, agents))
			}
		default:
			phases = append(phases, featurePhases(s.Name(), f, o, ends, mtu)...)
		}
	}
	if len(notes.Steps) > 0 {
		phases = append(phases, notes)
	}
	return phases, nil
}

// hostOn says whether every node named has a host-network agent.
func hostOn(agents []suite.Endpoint, nodes ...string) bool {
	for _, n := range nodes {
		if !slices.ContainsFunc(agents, func(a suite.Endpoint) bool { return a.HostNetwork && a.Node == n }) {
			return false
		}
	}
	return true
}

// ends are the pods a feature is tried between: src gets the feature,
// dst is a pod on another node, host the host-network agent on dst's
// node (an address of the underlay), flooder a second pod on src's node.
type ends struct {
	src, dst      suite.Endpoint
	host, flooder *suite.Endpoint
}

func pickEnds(agents []suite.Endpoint) (ends, error) {
	var pods, hosts []suite.Endpoint
	for _, a := range agents {
		if a.HostNetwork {
			hosts = append(hosts, a)
		} else {
			pods = append(pods, a)
		}
	}
	byNode := func(eps []suite.Endpoint) {
		sort.SliceStable(eps, func(i, j int) bool {
			if eps[i].Node != eps[j].Node {
				return eps[i].Node < eps[j].Node
			}
			return eps[i].Name < eps[j].Name
		})
	}
	byNode(pods)
	byNode(hosts)
	var e ends
	if len(pods) == 0 {
		return e, fmt.Errorf("no pod agents online (%d agents)", len(agents))
	}
	e.src = pods[0]
	i := slices.IndexFunc(pods, func(p suite.Endpoint) bool { return p.Node != e.src.Node })
	if i < 0 {
		return e, fmt.Errorf("needs pod agents on two nodes (all %d on %s)", len(pods), e.src.Node)
	}
	e.dst = pods[i]
	if j := slices.IndexFunc(hosts, func(h suite.Endpoint) bool { return h.Node == e.dst.Node }); j >= 0 {
		e.host = &hosts[j]
	}
	if j := slices.IndexFunc(pods[1:], func(p suite.Endpoint) bool { return p.Node == e.src.Node }); j >= 0 {
		e.flooder = &pods[1+j]
	}
	return e, nil
}

// step is one step of feature f, labelled with what Rows needs (the
// feature's facts travel with the run, so stored runs keep their rows).
func step(f Feature, backend, role string, src, dst suite.Endpoint, spec probe.Spec) suite.Step {
	if spec.Timeout == 0 {
		spec.Timeout = probe.Duration(10 * time.Second)
	}
	var set []string
	for k, v := range f.Set {
		set = append(set, k+"="+v)
	}
	sort.Strings(set)
	if f.Resource != "" {
		set = append(set, f.Resource)
	}
	return suite.Step{Connection: fmt.Sprintf("%s %s", f.CNI, f.Name), Backend: backend, Measure: spec.Kind, Src: src, Dst: dst, Spec: spec,
		Labels: map[string]string{LabelFeature: f.Name, LabelClass: f.Class, labelRole: role, LabelSet: strings.Join(set, ","),
			labelValue: strconv.FormatFloat(f.Value, 'f', -1, 64)}}
}

// featurePhases are the phases that try f: the pod standing in for src
// carries f's annotations for the phase.
func featurePhases(name string, f Feature, o suite.Options, e ends, mtu int) []suite.Phase {
	change := suite.Change{What: suite.CapPodAnnotate, Member: e.src.Name, PodAnnotations: f.Set}
	ph := suite.Phase{Name: fmt.Sprintf("%s %s %s", name, f.CNI, f.Name), Changes: []suite.Change{change}}
	src, dst := e.src, e.dst
	if f.Direction == DirIngress {
		src, dst = dst, src
	}
	switch f.Class {
	case ClassBandwidth:
		st := step(f, o.Backend, roleFlow, src, dst, probe.Spec{Kind: probe.KindTCP, Target: dst.ResponderAddr,
			Duration: probe.Duration(o.Time), Interval: probe.Duration(interval)})
		st.Exclusive = true
		st.Labels[labelMTU] = strconv.Itoa(mtu)
		ph.Steps = []suite.Step{st}
	case ClassPacketRate:
		// Real datagrams (offload off): a netfilter limit counts packets
		// as it sees them, and a GSO super-packet of a dozen datagrams is
		// one to it, so with offload the flood passes a 1000/s limit at
		// twelve times the rate.
		rate := uint64(offeredPPS * ppsSize * 8)
		st := step(f, o.Backend, roleFlow, src, dst, probe.Spec{Kind: probe.KindUDP, Target: dst.ResponderAddr,
			Duration: probe.Duration(o.Time), Interval: probe.Duration(interval), RateBps: &rate, Size: ppsSize, Offload: probe.OffloadOff})
		st.Exclusive = true
		st.Labels[labelOffered] = strconv.Itoa(offeredPPS)
		ph.Steps = []suite.Step{st}
	case ClassConnections:
		// Twice the limit, one connect every 5 ms, each bounded by
		// 500 ms, all held until the last has ended.
		st := step(f, o.Backend, roleFlow, src, dst, probe.Spec{Kind: probe.KindConnect, Target: dst.ResponderAddr,
			Count: 2 * int(f.Value), Interval: probe.Duration(5 * time.Millisecond), Timeout: probe.Duration(500 * time.Millisecond)})
		ph.Steps = []suite.Step{st}
	case ClassDSCP:
		rate := uint64(1e6)
		spec := func(to suite.Endpoint) probe.Spec {
			return probe.Spec{Kind: probe.KindUDP, Target: to.ResponderAddr, Duration: probe.Duration(time.Second), RateBps: &rate, Size: 200}
		}
		ph.Steps = []suite.Step{step(f, o.Backend, roleLeaving, e.src, *e.host, spec(*e.host)), step(f, o.Backend, rolePod, e.src, e.dst, spec(e.dst))}
	case ClassPriority:
		under := func(role string) []suite.Step {
			flood := step(f, o.Backend, roleFlood, *e.flooder, e.dst, probe.Spec{Kind: probe.KindTCP, Target: e.dst.ResponderAddr,
				Duration: probe.Duration(o.Time), Interval: probe.Duration(interval)})
			flood.Exclusive = true
			rr := step(f, o.Backend, role, e.src, e.dst, probe.Spec{Kind: probe.KindRR, Target: e.dst.ResponderAddr, Duration: probe.Duration(o.Time)})
			return []suite.Step{flood, rr}
		}
		plain := suite.Phase{Name: ph.Name + " (without)", Concurrent: true, Steps: under(rolePlain)}
		ph.Concurrent, ph.Steps = true, under(rolePrio)
		return []suite.Phase{plain, ph}
	}
	return []suite.Phase{ph}
}

// Rows implements suite.Suite: one row per feature tried or not, from the
// steps' labels and results alone.
func (Suite) Rows(outcomes []suite.Outcome) []suite.Row {
	var order []string
	groups := map[string][]suite.Outcome{}
	for _, o := range outcomes {
		k := o.Step.Labels[LabelFeature]
		if k == "" {
			continue
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], o)
	}
	rows := make([]suite.Row, 0, len(order))
	for _, k := range order {
		rows = append(rows, featureRow(groups[k]))
	}
	return rows
}

func featureRow(os []suite.Outcome) suite.Row {
	first := os[0].Step
	r := suite.Row{Connection: first.Connection, Backend: first.Backend, Src: first.Src.Name, Dst: first.Dst.Name, Repetitions: 1,
		Median: map[string]float64{}, Labels: map[string]string{LabelFeature: first.Labels[LabelFeature], LabelClass: first.Labels[LabelClass],
			LabelSet: first.Labels[LabelSet]}}
	value, _ := strconv.ParseFloat(first.Labels[labelValue], 64)
	role := map[string]suite.Outcome{}
	var wires []suite.Outcome
	for _, o := range os {
		if o.Step.Labels[labelRole] == roleWire {
			wires = append(wires, o)
			if o.Err != "" {
				r.Errors = append(r.Errors, fmt.Sprintf("wire watch of %s: %s", o.Step.Labels[labelWireOf], o.Err))
			}
			continue
		}
		role[o.Step.Labels[labelRole]] = o
		if o.Err != "" {
			r.Errors = append(r.Errors, fmt.Sprintf("%s: %s", o.Step.Labels[labelRole], o.Err))
		}
	}
	var j Judgement
	flow, hasFlow := role[roleFlow]
	switch {
	case first.Labels[labelRole] == roleNote:
		j = Judgement{first.Labels[LabelVerdict], first.Labels[LabelWhy]}
	case first.Labels[LabelClass] == ClassBandwidth && hasFlow && flow.Result != nil:
		j = bandwidthRow(&r, flow, value)
	case first.Labels[LabelClass] == ClassPacketRate && hasFlow && flow.Result != nil && flow.Result.PPS != nil:
		offered, _ := strconv.ParseFloat(flow.Step.Labels[labelOffered], 64)
		if p := flow.Result.Packets; p != nil && flow.Result.DurationS > 0 {
			offered = float64(p.Sent) / flow.Result.DurationS // what the sender managed
		}
		r.Median["limit_pps"], r.Median["offered_pps"], r.Median["received_pps"] = value, offered, *flow.Result.PPS
		j = PacketRate(value, offered, *flow.Result.PPS)
	case first.Labels[LabelClass] == ClassConnections && hasFlow && flow.Result != nil && flow.Result.Connects != nil && flow.Result.Connects.Held != nil:
		tl := flow.Result.Connects
		r.Median["limit_connections"], r.Median["attempted"], r.Median["held"] = value, float64(tl.Attempts), float64(*tl.Held)
		r.Median["reset"], r.Median["timed_out"] = float64(tl.Outcomes[probe.ConnectRefused]), float64(tl.Outcomes[probe.ConnectTimeout])
		j = Connections(value, tl.Attempts, *tl.Held, tl.Outcomes[probe.ConnectRefused], tl.Outcomes[probe.ConnectTimeout])
	case first.Labels[LabelClass] == ClassTunnelMark:
		wireRow(&r, wires, false)
		j = tunnelMark(&r, flow, hasFlow, value)
	case first.Labels[LabelClass] == ClassDSCP:
		wireRow(&r, wires, true)
		got := func(k string) *int {
			if o, ok := role[k]; ok && o.Result != nil && o.Result.DSCPReceived != nil {
				return o.Result.DSCPReceived
			}
			return nil
		}
		leaving, pod := got(roleLeaving), got(rolePod)
		for k, v := range map[string]*int{"dscp_received.leaving": leaving, "dscp_received.pod": pod} {
			if v != nil {
				r.Median[k] = float64(*v)
			}
		}
		if leaving == nil && len(r.Errors) > 0 {
			j = Judgement{NotMeasured, strings.Join(r.Errors, "; ")}
		} else {
			j = DSCP(int(value), leaving, pod)
		}
		j.Why += dscpWire(r)
		if o, ok := role[roleLeaving]; ok {
			r.Dst = o.Step.Dst.Name
		}
	case first.Labels[LabelClass] == ClassPriority:
		p50 := func(k string) float64 {
			if o, ok := role[k]; ok && o.Result != nil && o.Result.RTTms != nil {
				return o.Result.RTTms.P50
			}
			return 0
		}
		r.Median["rr_p50_ms.plain"], r.Median["rr_p50_ms.prio"] = p50(rolePlain), p50(rolePrio)
		j = Priority(p50(rolePlain), p50(rolePrio))
	default:
		j = Judgement{NotMeasured, strings.Join(r.Errors, "; ")}
	}
	r.Labels[LabelVerdict], r.Labels[LabelWhy] = j.Verdict, j.Why
	r.Min, r.Max = r.Median, r.Median
	return r
}

// bandwidthRow analyses a limited flow as the shaping suite does (its
// goodput against the limit's, per 100 ms) and judges it.
func bandwidthRow(r *suite.Row, o suite.Outcome, limit float64) Judgement {
	mtu, _ := strconv.Atoi(o.Step.Labels[labelMTU])
	expected := shaping.GoodputBps(uint64(limit), "tcp", 0, mtu)
	ser := shaping.SeriesBps(o.Result.Intervals, interval, time.Duration(o.Step.Spec.Duration))
	a := shaping.AnalyzeSeries(ser, interval, expected)
	r.Median["limit_bps"], r.Median["goodput_limit_bps"] = limit, expected
	r.Median["first_interval_bps"], r.Median["steady_state_bps"] = a.FirstBps, a.SteadyBps
	if expected > 0 {
		r.Median["overshoot_pct"] = 100 * (a.FirstBps/expected - 1)
	}
	if a.ConformS != nil {
		r.Median["time_to_conform_s"] = *a.ConformS
	}
	r.Series = map[string][]float64{"receiver_bps": ser}
	by := ""
	if o.Step.Applied != nil && o.Step.Applied.By != "CNI" {
		by = o.Step.Applied.By
	}
	if len(ser) == 0 {
		return Judgement{NotMeasured, "no interval reports"}
	}
	return Bandwidth(expected, a.FirstBps, a.SteadyBps, a.ConformS, by)
}
