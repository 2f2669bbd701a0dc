package stamp

import (
	"fmt"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/stats"
)

// result turns the run's records into cnperf's figures.
//
//   - rtt_ms: (T4 − T1) − (T3 − T2), the reflector's dwell subtracted, as
//     rr's rtt_ms; T1 and T4 are this host's clock (T4 the kernel's receive
//     stamp), T2 and T3 the reflector's.
//   - forward / reverse delay_ms: T2 − T1 and T4 − T3, across two clocks,
//     with error_bound_ms the sum of both Error Estimates.
//   - Loss per direction from a stateful reflector's own sequence numbers:
//     up to the last answered test packet, the reflector counted
//     maxReflSeq+1 arrivals, so forward lost = answered window − arrivals
//     and reverse lost = arrivals − replies received.
func (st *run) result(spec probe.Spec, cfg config, myErr ErrorEstimate, auth bool) *probe.Result {
	st.mu.Lock()
	defer st.mu.Unlock()
	res := &probe.Result{Kind: probe.KindStamp, Tool: "cnperf", DSCP: spec.DSCP(), TOS: cfg.tos}
	rtt, fwd, rev := stats.NewRecorder(), stats.NewRecorder(), stats.NewRecorder()
	var rttJ, fwdJ, revJ stats.Jitter
	var (
		recv, userRx, lastAnswered int64 = 0, 0, -1
		stateful                   bool
		maxRefl                    uint32
		reflErr                    ErrorEstimate
		fwdDSCP, revDSCP           = -1, -1
		fwdDSCPMixed, revDSCPMixed bool
		cosUnanswered, cosRefused  int64
		tlvIssue                   string
		tsi                        *TimestampInfo
	)
	for i, p := range st.pkts {
		if !p.got {
			continue
		}
		r := p.reply
		recv++
		lastAnswered = int64(i)
		if !r.kernelRx {
			userRx++
		}
		dwell := r.t3 - r.t2
		rtt.Record(r.t4 - p.t1 - dwell)
		rttJ.Add(p.t1, r.t4-dwell)
		fwd.Record(r.t2 - p.t1)
		fwdJ.Add(p.t1, r.t2)
		rev.Record(r.t4 - r.t3)
		revJ.Add(r.t3, r.t4)
		if r.reflSeq != uint32(i) {
			stateful = true
		}
		maxRefl = max(maxRefl, r.reflSeq)
		reflErr = r.reflErr
		if r.tosOK {
			d := r.tos >> 2
			revDSCPMixed = revDSCPMixed || revDSCP >= 0 && revDSCP != d
			revDSCP = d
		}
		switch {
		case r.tlvIssue != "":
			tlvIssue = r.tlvIssue
		case r.cos == nil:
			cosUnanswered++
		default:
			d := int(r.cos.DSCP2)
			fwdDSCPMixed = fwdDSCPMixed || fwdDSCP >= 0 && fwdDSCP != d
			fwdDSCP = d
			if r.cos.RP != 0 {
				cosRefused++
			}
		}
		if r.tsi != nil {
			tsi = r.tsi
		}
	}
	sentN := int64(len(st.pkts))
	lost := sentN - recv
	res.Packets = &probe.PacketCounts{Sent: sentN, Received: recv, Lost: lost, Duplicate: st.dups}
	res.LossPct = probe.Float(stats.LossPct(lost, sentN))
	if recv == 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("no reflected packet came back out of %d sent", sentN))
		return res
	}
	r := rtt.Summary(1e-6)
	res.RTTms = &r
	res.JitterMs = probe.Float(rttJ.Value() / 1e6)
	bound := probe.Float((myErr.Bound() + reflErr.Bound()).Seconds() * 1e3)
	f, v := fwd.Summary(1e-6), rev.Summary(1e-6)
	res.Forward = &probe.Direction{DelayMs: &f, ErrorBoundMs: bound, JitterMs: probe.Float(fwdJ.Value() / 1e6)}
	res.Reverse = &probe.Direction{DelayMs: &v, ErrorBoundMs: bound, JitterMs: probe.Float(revJ.Value() / 1e6)}
	res.Notes = append(res.Notes, fmt.Sprintf("one-way delays read two clocks: uncertain by ±%.3f ms (Error Estimates: this host %s, reflector %s)",
		*bound, describeErr(myErr), describeErr(reflErr)))

	// Loss per direction.
	if stateful {
		window := lastAnswered + 1
		arrived := int64(maxRefl) + 1
		fl, rl := max(window-arrived, 0), max(arrived-recv, 0)
		res.Forward.Lost, res.Forward.LossPct = probe.Int64(fl), probe.Float(stats.LossPct(fl, window))
		res.Reverse.Lost, res.Reverse.LossPct = probe.Int64(rl), probe.Float(stats.LossPct(rl, arrived))
		if tail := sentN - window; tail > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%d test packets after the last answered one are lost in a direction that cannot be told", tail))
		}
	} else if lost == 0 {
		res.Forward.Lost, res.Forward.LossPct = probe.Int64(0), probe.Float(0)
		res.Reverse.Lost, res.Reverse.LossPct = probe.Int64(0), probe.Float(0)
	} else {
		res.Notes = append(res.Notes, "loss per direction unknown: the reflector echoed the sender's sequence numbers (stateless, or every loss was on the way back)")
	}

	// DSCP forward (the reflector's CoS answer) and back (the reply's TOS).
	switch {
	case tlvIssue != "":
		res.Notes = append(res.Notes, "TLVs ignored: "+tlvIssue)
	case fwdDSCP < 0:
		res.Notes = append(res.Notes, "dscp_received unavailable: the reflector did not answer the Class of Service TLV (it left the U flag: TLVs not understood)")
	default:
		res.DSCPReceived = probe.Int(fwdDSCP)
		res.DSCPSurvived = probe.Bool(fwdDSCP == res.DSCP && !fwdDSCPMixed)
		if fwdDSCPMixed {
			res.Notes = append(res.Notes, "the DSCP that arrived at the reflector changed during the test; dscp_received is the last")
		}
		if cosUnanswered > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%d replies had no Class of Service answer", cosUnanswered))
		}
	}
	if revDSCP >= 0 {
		res.Reverse.DSCPReceived = probe.Int(revDSCP)
		res.Reverse.DSCPSurvived = probe.Bool(revDSCP == res.DSCP && !revDSCPMixed)
	} else {
		res.Notes = append(res.Notes, "reverse dscp_received unavailable: this host's kernel reported no TOS for the replies")
	}
	if fwdDSCP >= 0 {
		res.Forward.DSCPReceived, res.Forward.DSCPSurvived = res.DSCPReceived, res.DSCPSurvived
	}
	if cosRefused > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("the reflector did not use the requested DSCP on %d replies (CoS RP field set)", cosRefused))
	}
	if tsi != nil {
		res.Notes = append(res.Notes, fmt.Sprintf("reflector timestamps: in %s/%s, out %s/%s",
			syncName(tsi.SyncIn), methodName(tsi.MethodIn), syncName(tsi.SyncOut), methodName(tsi.MethodOut)))
	}
	if userRx > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d of %d replies had no kernel receive timestamp; T4 is the time after the read for them", userRx, recv))
	}
	if st.dups > 0 || st.foreign > 0 || st.badHMAC > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("ignored: %d duplicate replies, %d packets of another session, %d failing the HMAC", st.dups, st.foreign, st.badHMAC))
	}
	if auth {
		res.Notes = append(res.Notes, "authenticated mode (HMAC-SHA-256)")
	}
	return res
}

func describeErr(e ErrorEstimate) string {
	s := "unsynchronised"
	if e.Synced() {
		s = "synchronised"
	}
	return fmt.Sprintf("%s, ±%v", s, e.Bound())
}

func syncName(v uint8) string {
	switch v {
	case SyncNTP:
		return "NTP"
	case SyncPTP:
		return "PTP"
	case 3:
		return "SSU/BITS"
	case 4:
		return "GNSS"
	case SyncLocal:
		return "local free-running"
	}
	return fmt.Sprintf("source %d", v)
}

func methodName(v uint8) string {
	switch v {
	case StampHW:
		return "hardware"
	case StampSWLocal:
		return "software"
	case 3:
		return "control plane"
	}
	return fmt.Sprintf("method %d", v)
}
