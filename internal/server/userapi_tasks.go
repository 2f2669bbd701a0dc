package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/external"
	"github.com/cnperf/cnperf/internal/qos"
	"github.com/cnperf/cnperf/internal/store"
)

// The user API's task endpoints (the seed's v1 tool tasks and v2 tasks), and
// how a requested task becomes a store task.

// v1Task turns a validated v1 request into a store task.
func (s *Server) v1Task(prefix string, tc api.TaskCreate, ix *agentIndex) (store.Task, error) {
	src, err := ix.resolve(prefix+"src_pod_uid", tc.SrcPodUID, false)
	if err != nil {
		return store.Task{}, err
	}
	dst, err := ix.resolve(prefix+"dst_pod_uid", tc.DstPodUID, false)
	if err != nil {
		return store.Task{}, err
	}
	if tc.SrcPodIP != "" && tc.SrcPodIP != src.PodIP {
		return store.Task{}, api.BadRequest(prefix+"src_pod_ip", "%s is not the IP of pod %s (%s)", tc.SrcPodIP, src.PodUID, src.PodIP)
	}
	if tc.DstPodIP != "" && tc.DstPodIP != dst.PodIP {
		return store.Task{}, api.BadRequest(prefix+"dst_pod_ip", "%s is not the IP of pod %s (%s)", tc.DstPodIP, dst.PodUID, dst.PodIP)
	}
	timeout, err := toolTimeout(tc.TaskType, tc.TaskParam, dst.PodIP)
	if err != nil {
		return store.Task{}, api.BadRequest(prefix+"task_param", "%v", err)
	}
	t := store.Task{
		SrcPodUID: src.PodUID, SrcPodIP: src.PodIP, DstPodUID: dst.PodUID, DstPodIP: dst.PodIP,
		Type: tc.TaskType, Param: tc.TaskParam, Exclusive: tc.TaskType == api.TypeIperf || tc.TaskType == api.TypeIperf3,
		Timeout: timeout,
	}
	if err := s.opts.Limits.checkTask(prefix, "task_param", "task_param", t); err != nil {
		return store.Task{}, err
	}
	return t, nil
}

// toolTimeout checks a tool task's param against the tool's allow-list
// (external.Build: no shell, known flags only) and returns how long the task
// may run: what its arguments imply, plus set-up slack.
func toolTimeout(typ, param, dstIP string) (time.Duration, error) {
	inv, err := external.Build(typ, param, dstIP)
	if err != nil {
		return 0, err
	}
	return inv.Timeout() + toolSlack, nil
}

// toolSlack covers the destination's server start and result delivery.
const toolSlack = 10 * time.Second

func (s *Server) handleTaskCreateV1(w http.ResponseWriter, r *http.Request) {
	var tcs []api.TaskCreate
	if err := decode(w, r, api.MaxBody, &tcs); err != nil {
		s.fail(w, r, true, err)
		return
	}
	if err := s.opts.Limits.checkTaskCreates(tcs); err != nil {
		s.fail(w, r, true, err)
		return
	}
	if err := api.ValidateTaskCreates(tcs, nil); err != nil {
		s.fail(w, r, true, err)
		return
	}
	ix, err := s.agentIndex(r.Context())
	if err != nil {
		s.fail(w, r, true, err)
		return
	}
	refs := make([]string, 0, 2*len(tcs))
	for _, tc := range tcs {
		refs = append(refs, tc.SrcPodUID, tc.DstPodUID)
	}
	if err := ix.prefetch(refs); err != nil {
		s.fail(w, r, true, err)
		return
	}
	ts := make([]store.Task, 0, len(tcs))
	for i, tc := range tcs {
		t, err := s.v1Task(fmt.Sprintf("[%d].", i), tc, ix)
		if err != nil {
			s.fail(w, r, true, err)
			return
		}
		ts = append(ts, t)
	}
	created, err := s.st.CreateTasks(r.Context(), "", ts, s.now())
	if err != nil {
		s.fail(w, r, true, err)
		return
	}
	ids := make([]string, 0, len(created))
	for _, t := range created {
		ids = append(ids, t.TaskID)
		s.log.Info("task created", "task_id", t.TaskID, "type", t.Type, "src", t.SrcPodUID, "dst", t.DstPodUID)
	}
	s.handOutCreated(r.Context(), created)
	s.okV1(w, ids)
}

func (s *Server) handleTaskV1(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("task_id")
	if id == "" {
		s.fail(w, r, true, api.BadRequest("task_id", "missing query parameter"))
		return
	}
	t, err := s.st.GetTask(r.Context(), id)
	if err != nil {
		s.fail(w, r, true, wrapNotFound(err, "task "+id))
		return
	}
	s.writeTaskV1(w, r, t)
}

// throughputKinds are exclusive by default.
func exclusiveByDefault(typ string, sp *probe.Spec) bool {
	switch typ {
	case api.TypeIperf, api.TypeIperf3:
		return true
	case api.TypeProbe:
		return sp != nil && (sp.Kind == probe.KindTCP || sp.Kind == probe.KindUDP)
	}
	return false
}

// checkVia checks a task's Via (a Service in front of the destination's
// responder, see api.RunTask): an IP:PORT literal on the responder's own
// port, so a task can only ever reach a responder's port, never an
// arbitrary service.
func checkVia(via, responder string) (string, error) {
	ap, err := netip.ParseAddrPort(via)
	if err != nil {
		return "", fmt.Errorf("%q: want IP:PORT of a Service in front of the destination's responder", via)
	}
	rp, err := netip.ParseAddrPort(responder)
	if err != nil {
		return "", fmt.Errorf("the destination's responder address %q is not IP:PORT", responder)
	}
	if ap.Port() != rp.Port() {
		return "", fmt.Errorf("%q: port %d is not the destination responder's port %d", via, ap.Port(), rp.Port())
	}
	return ap.String(), nil
}

// v2Task turns one run task into a store task, filling the probe's target
// from the destination agent.
func (s *Server) v2Task(prefix string, rt api.RunTask, ix *agentIndex) (store.Task, error) {
	if rt.Src == "" {
		return store.Task{}, api.BadRequest(prefix+"src", "missing (a pod uid or pod name)")
	}
	if rt.Dst == "" {
		return store.Task{}, api.BadRequest(prefix+"dst", "missing (a pod uid or pod name)")
	}
	src, err := ix.resolve(prefix+"src", rt.Src, true)
	if err != nil {
		return store.Task{}, err
	}
	dst, err := ix.resolve(prefix+"dst", rt.Dst, true)
	if err != nil {
		return store.Task{}, err
	}
	if rt.Timeout < 0 {
		return store.Task{}, api.BadRequest(prefix+"timeout", "must not be negative")
	}
	typ := rt.Type
	if typ == "" {
		typ = api.TypeProbe
	}
	t := store.Task{SrcPodUID: src.PodUID, SrcPodIP: src.PodIP, DstPodUID: dst.PodUID, DstPodIP: dst.PodIP, Type: typ, Timeout: rt.Timeout.D()}
	switch {
	case typ == api.TypeProbe:
		if rt.Spec == nil {
			return store.Task{}, api.BadRequest(prefix+"spec", "missing: a probe task needs a spec")
		}
		if rt.Param != "" {
			return store.Task{}, api.BadRequest(prefix+"param", "only for v1 tool types; a probe task takes a spec")
		}
		sp := *rt.Spec
		kind, err := probe.ParseKind(sp.Kind)
		if err != nil {
			return store.Task{}, api.BadRequest(prefix+"spec.kind", "%v", err)
		}
		sp.Kind = kind
		if sp.Target != "" {
			return store.Task{}, api.BadRequest(prefix+"spec.target", "set by the server from the destination agent: leave it empty")
		}
		// A probe aims at the destination's responder, except these,
		// which aim at its pod IP (a wire or queue watch's route to the
		// peer names the device watched).
		toResponder := true
		switch kind {
		case probe.KindPing, probe.KindTrace, probe.KindWire, probe.KindQueue:
			toResponder = false
			if rt.Via != "" {
				return store.Task{}, api.BadRequest(prefix+"via", "only for probes to the destination's responder, not %s", kind)
			}
			sp.Target = dst.PodIP
		default:
			if dst.ResponderAddr == "" {
				return store.Task{}, api.BadRequest(prefix+"dst", "agent %s has no responder address", dst.PodUID)
			}
			sp.Target = dst.ResponderAddr
			if rt.Via != "" {
				via, err := checkVia(rt.Via, dst.ResponderAddr)
				if err != nil {
					return store.Task{}, api.BadRequest(prefix+"via", "%v", err)
				}
				sp.Target = via
			}
		}
		if s.opts.Probers != nil {
			if err := s.opts.Probers.Validate(sp); err != nil {
				return store.Task{}, api.BadRequest(prefix+"spec", "%v", err)
			}
		} else if err := sp.ValidateCommon(toResponder); err != nil {
			return store.Task{}, api.BadRequest(prefix+"spec", "%v", err)
		}
		b, err := json.Marshal(sp)
		if err != nil {
			return store.Task{}, fmt.Errorf("encode spec: %w", err)
		}
		if rt.QoS != nil {
			if b, err = withQoS(prefix, b, *rt.QoS); err != nil {
				return store.Task{}, err
			}
		}
		t.Spec = b
		if t.Timeout == 0 {
			t.Timeout = sp.DurationOr(10*time.Second) + sp.StartDelay.D() + DefaultProbeOverhead
		}
		t.Exclusive = exclusiveByDefault(typ, &sp)
	case typ == api.TypeQoSHold:
		// The hold's spec is its duration alone; its set-up is stored
		// beside it under "qos", as a probe task's is.
		if rt.QoS == nil {
			return store.Task{}, api.BadRequest(prefix+"qos", "missing: a %s task holds a QoS set-up", typ)
		}
		if rt.Param != "" {
			return store.Task{}, api.BadRequest(prefix+"param", "only for v1 tool types")
		}
		if rt.Spec == nil || rt.Spec.Duration <= 0 {
			return store.Task{}, api.BadRequest(prefix+"spec.duration", "missing: how long the %s task holds its set-up at most", typ)
		}
		if (*rt.Spec != probe.Spec{Duration: rt.Spec.Duration}) {
			return store.Task{}, api.BadRequest(prefix+"spec", "a %s task's spec takes only duration", typ)
		}
		b, err := json.Marshal(probe.Spec{Duration: rt.Spec.Duration})
		if err != nil {
			return store.Task{}, fmt.Errorf("encode spec: %w", err)
		}
		if t.Spec, err = withQoS(prefix, b, *rt.QoS); err != nil {
			return store.Task{}, err
		}
		if t.Timeout == 0 {
			t.Timeout = rt.Spec.Duration.D() + DefaultProbeOverhead
		}
	case api.IsV1Type(typ):
		if rt.Spec != nil {
			return store.Task{}, api.BadRequest(prefix+"spec", "only for probe tasks; a %s task takes param", typ)
		}
		if rt.QoS != nil {
			return store.Task{}, api.BadRequest(prefix+"qos", "only for probe tasks")
		}
		if rt.Via != "" {
			return store.Task{}, api.BadRequest(prefix+"via", "only for probe tasks")
		}
		if err := api.CheckParamText(prefix+"param", rt.Param); err != nil {
			return store.Task{}, err
		}
		timeout, err := toolTimeout(typ, rt.Param, dst.PodIP)
		if err != nil {
			return store.Task{}, api.BadRequest(prefix+"param", "%v", err)
		}
		t.Param = rt.Param
		if t.Timeout == 0 {
			t.Timeout = timeout
		}
		t.Exclusive = exclusiveByDefault(typ, nil)
	default:
		return store.Task{}, api.BadRequest(prefix+"type", "unknown task type %q (want probe, %s, %s)", typ, api.TypeQoSHold, strings.Join(api.V1Types, ", "))
	}
	if rt.Exclusive != nil {
		t.Exclusive = *rt.Exclusive
	}
	timeoutField := "timeout" // given, or implied by the spec or the param
	if rt.Timeout == 0 && (typ == api.TypeProbe || typ == api.TypeQoSHold) {
		timeoutField = "spec.duration"
	} else if rt.Timeout == 0 {
		timeoutField = "param"
	}
	if err := s.opts.Limits.checkTask(prefix, "param", timeoutField, t); err != nil {
		return store.Task{}, err
	}
	return t, nil
}

// withQoS validates a task's QoS set-up and adds it to the stored spec
// JSON under "qos" (see storedQoS).
func withQoS(prefix string, spec []byte, q qos.Spec) ([]byte, error) {
	if _, err := qos.Build(q); err != nil {
		var ve *qos.ValidationError
		if errors.As(err, &ve) {
			return nil, api.BadRequest(prefix+"qos."+ve.Field, "%s", ve.Reason)
		}
		return nil, api.BadRequest(prefix+"qos", "%v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(spec, &m); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	qb, err := json.Marshal(q)
	if err != nil {
		return nil, fmt.Errorf("encode qos: %w", err)
	}
	m["qos"] = qb
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	return out, nil
}

func (s *Server) handleTaskList(w http.ResponseWriter, r *http.Request) {
	p, err := pageOf(r)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	q := r.URL.Query()
	f := store.TaskFilter{RunID: q.Get("run"), State: store.TaskState(q.Get("state")), AgentUID: q.Get("agent"), Type: q.Get("type")}
	if f.State != "" && !f.State.Valid() {
		s.fail(w, r, false, api.BadRequest("state", "unknown task state %q", f.State))
		return
	}
	ts, total, err := s.st.ListTasks(r.Context(), f, p)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	out := api.TaskPage{Tasks: make([]api.TaskV2, 0, len(ts)), Total: total}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, taskV2(t))
	}
	if pageFull(p, len(ts)) {
		out.NextAfter = ts[len(ts)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleTaskGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t, err := s.st.GetTask(r.Context(), id)
	if err != nil {
		s.fail(w, r, false, wrapNotFound(err, "task "+id))
		return
	}
	writeJSON(w, http.StatusOK, taskV2(t))
}

// handleTaskRaw answers a task's raw tool output on its own, as text.
func (s *Server) handleTaskCancel(w http.ResponseWriter, r *http.Request) {
	reason, err := s.cancelReason(w, r)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	id := r.PathValue("id")
	t, err := s.st.Cancel(r.Context(), id, reason, s.now())
	if err != nil {
		s.fail(w, r, false, wrapNotFound(err, "task "+id))
		return
	}
	s.disp.dropStaged(t.TaskID)
	s.disp.stopTask(t.SrcPodUID, t.TaskID)
	if t.Exclusive {
		s.disp.wakePending()
	}
	writeJSON(w, http.StatusOK, taskV2(t))
}
