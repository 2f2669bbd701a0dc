package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/probe/external"
	"github.com/cnperf/cnperf/internal/store"
)

// Limits bound what one request may ask of the agents and of the server.
// A zero field takes its default (DefaultLimits, written down in
// docs/control-plane.md); `cnperf server` sets them from its --max-* and
// --min-* flags. A request over a limit is answered 422 with the field at
// fault and the limit, and nothing is stored.
type Limits struct {
	MaxDuration     time.Duration // a probe's duration, a tool's -t / ping -w
	MaxStreams      int           // tcp streams, iperf3 -P
	MaxRateBps      uint64        // a probe's rate_bps, iperf -b, iperf3 -b / --fq-rate
	MaxPacketRate   float64       // packets per second: udp rate / size, ping 1 / interval, iperf2 -b NNpps
	MaxPingCount    int           // ping count (-c)
	MinPingInterval time.Duration // ping interval (-i)
	MaxPingSize     int           // ping payload (-s)
	MaxTaskTimeout  time.Duration // a task's timeout, given or implied by its arguments
	MinQdiscRateBps uint64        // a QoS set-up's rates (tbf, htb)
	MaxQdiscLife    time.Duration // how long a QoS set-up may stay: its task's timeout
	MaxTasks        int           // tasks in one create request (v1 or v2)
	MaxRunsInFlight int           // runs not finished, per user token
	MaxAgents       int           // agents held in memory (online ones)
}

// DefaultLimits are the limits a server has unless told otherwise: wide
// enough for every suite cnperf ships (baseline pings every 10 ms, capacity
// searches UDP rates), far below what hurts a cluster.
func DefaultLimits() Limits {
	return Limits{
		MaxDuration:     10 * time.Minute,
		MaxStreams:      32,
		MaxRateBps:      100_000_000_000, // 100 Gbit/s
		MaxPacketRate:   2_000_000,
		MaxPingCount:    10_000,
		MinPingInterval: 10 * time.Millisecond,
		MaxPingSize:     9000,
		MaxTaskTimeout:  15 * time.Minute,
		MinQdiscRateBps: 1_000_000, // 1 Mbit/s
		MaxQdiscLife:    10 * time.Minute,
		MaxTasks:        api.MaxTasksPerRequest,
		MaxRunsInFlight: 64,
		MaxAgents:       20_000,
	}
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	def := func(v *time.Duration, dv time.Duration) {
		if *v <= 0 {
			*v = dv
		}
	}
	defInt := func(v *int, dv int) {
		if *v <= 0 {
			*v = dv
		}
	}
	def(&l.MaxDuration, d.MaxDuration)
	def(&l.MinPingInterval, d.MinPingInterval)
	def(&l.MaxTaskTimeout, d.MaxTaskTimeout)
	def(&l.MaxQdiscLife, d.MaxQdiscLife)
	defInt(&l.MaxStreams, d.MaxStreams)
	defInt(&l.MaxPingCount, d.MaxPingCount)
	defInt(&l.MaxPingSize, d.MaxPingSize)
	defInt(&l.MaxTasks, d.MaxTasks)
	defInt(&l.MaxRunsInFlight, d.MaxRunsInFlight)
	defInt(&l.MaxAgents, d.MaxAgents)
	if l.MaxRateBps == 0 {
		l.MaxRateBps = d.MaxRateBps
	}
	if l.MaxPacketRate <= 0 {
		l.MaxPacketRate = d.MaxPacketRate
	}
	if l.MinQdiscRateBps == 0 {
		l.MinQdiscRateBps = d.MinQdiscRateBps
	}
	l.MaxTasks = min(l.MaxTasks, api.MaxTasksPerRequest) // the API's own bound
	return l
}

// Field lengths (bytes) the API accepts.
const (
	MaxNameLen = 253     // pod, namespace, node and suite names, agent references (a DNS name)
	MaxUIDLen  = 128     // pod uids, task, run, report and boot ids
	MaxTextLen = 4 << 10 // free text: reasons, errors, versions, addresses
	// MaxParamsLen bounds a run's params (JSON a suite keeps with its run).
	MaxParamsLen = 64 << 10
)

// overLimit is the 422 answer to a request over one of the limits.
func overLimit(field, format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusUnprocessableEntity, Field: field, Message: fmt.Sprintf(format, args...)}
}

// checkLen refuses a field longer than max bytes.
func checkLen(field, v string, max int) error {
	if len(v) > max {
		return overLimit(field, "%d bytes: over the limit of %d", len(v), max)
	}
	return nil
}

// checkLens checks several fields: pairs of name and value against max.
func checkLens(max int, fieldValues ...string) error {
	for i := 0; i+1 < len(fieldValues); i += 2 {
		if err := checkLen(fieldValues[i], fieldValues[i+1], max); err != nil {
			return err
		}
	}
	return nil
}

// checkTask holds a task about to be stored against the limits. prefix
// names the task ("[0]." or "tasks[0]."); paramField is the name of its
// tool arguments (task_param in v1, param in v2) and timeoutField where
// its timeout came from.
func (l Limits) checkTask(prefix, paramField, timeoutField string, t store.Task) error {
	if len(t.Spec) > 0 {
		var sp probe.Spec
		if err := json.Unmarshal(t.Spec, &sp); err != nil {
			return fmt.Errorf("decode spec: %w", err)
		}
		if err := l.checkSpec(prefix+"spec.", sp); err != nil {
			return err
		}
		if q := storedQoS(t.Spec); q != nil {
			for _, r := range []struct {
				field string
				v     uint64
			}{{"rate_bps", q.RateBps}, {"high_rate_bps", q.HighRateBps}} {
				if r.v != 0 && r.v < l.MinQdiscRateBps {
					return overLimit(prefix+"qos."+r.field, "%d bit/s: under the floor of %d bit/s (--min-qdisc-rate)", r.v, l.MinQdiscRateBps)
				}
			}
			if t.Timeout > l.MaxQdiscLife {
				return overLimit(prefix+timeoutField, "%s: a QoS set-up stays as long as its task may run, at most %s (--max-qdisc-lifetime)", t.Timeout, l.MaxQdiscLife)
			}
		}
	}
	if t.Param != "" || api.IsV1Type(t.Type) {
		if err := l.checkTool(prefix+paramField, t.Type, t.Param); err != nil {
			return err
		}
	}
	if t.Timeout > l.MaxTaskTimeout {
		return overLimit(prefix+timeoutField, "%s: over the limit of %s (--max-task-timeout)", t.Timeout, l.MaxTaskTimeout)
	}
	return nil
}

// checkSpec holds a probe spec against the limits; prefix ends in "spec.".
func (l Limits) checkSpec(prefix string, sp probe.Spec) error {
	if err := l.checkLoad(loadOfSpec(prefix, sp)); err != nil {
		return err
	}
	if sp.Kind == probe.KindPing {
		if sp.Count > l.MaxPingCount {
			return overLimit(prefix+"count", "%d: over the limit of %d pings (--max-ping-count)", sp.Count, l.MaxPingCount)
		}
		if iv := sp.Interval.D(); iv > 0 && iv < l.MinPingInterval {
			return overLimit(prefix+"interval", "%s: under the limit of %s (--min-ping-interval)", iv, l.MinPingInterval)
		}
		if sp.Size > l.MaxPingSize {
			return overLimit(prefix+"size", "%d bytes: over the limit of %d (--max-ping-size)", sp.Size, l.MaxPingSize)
		}
	}
	return nil
}

// checkTool holds a tool task's validated arguments against the limits:
// iperf3's and iperf2's through the same check as a probe spec
// (checkLoad), ping's by its count, interval, size and run time.
func (l Limits) checkTool(field, tool, param string) error {
	args, err := external.ParseParam(tool, param)
	if err != nil {
		return api.BadRequest(field, "%v", err)
	}
	switch tool {
	case external.ToolIperf3, external.ToolIperf2:
		return l.checkLoad(loadOfTool(field, tool, args))
	case external.ToolPing:
		return l.checkPing(field, args)
	}
	return nil
}

// checkPing holds ping's arguments against the limits; its run time is -c
// times -i, or -w.
func (l Limits) checkPing(field string, args []string) error {
	seconds := map[string]float64{"-i": 1, "-c": 5}
	for i := 0; i+1 < len(args); i++ {
		flag, val := args[i], args[i+1]
		num, numErr := strconv.ParseFloat(val, 64)
		if numErr != nil {
			continue
		}
		seconds[flag] = num
		switch flag {
		case "-w":
			if d := time.Duration(num * float64(time.Second)); d > l.MaxDuration {
				return overLimit(field, "-w %s: over the limit of %s (--max-task-duration)", val, l.MaxDuration)
			}
		case "-c":
			if num > float64(l.MaxPingCount) {
				return overLimit(field, "-c %s: over the limit of %d pings (--max-ping-count)", val, l.MaxPingCount)
			}
		case "-i":
			if time.Duration(num*float64(time.Second)) < l.MinPingInterval {
				return overLimit(field, "-i %s: under the limit of %s (--min-ping-interval)", val, l.MinPingInterval)
			}
		case "-s":
			if num > float64(l.MaxPingSize) {
				return overLimit(field, "-s %s: over the limit of %d bytes (--max-ping-size)", val, l.MaxPingSize)
			}
		}
	}
	run := seconds["-c"] * seconds["-i"]
	if w, ok := seconds["-w"]; ok {
		run = w
	}
	if d := time.Duration(run * float64(time.Second)); d > l.MaxDuration {
		return overLimit(field, "runs for %s by its arguments: over the limit of %s (--max-task-duration)", d, l.MaxDuration)
	}
	return nil
}

// checkTaskCount refuses a create request with more tasks than allowed.
func (l Limits) checkTaskCount(field string, n int) error {
	if n > l.MaxTasks {
		return overLimit(field, "%d tasks in one request: over the limit of %d (--max-tasks-per-request)", n, l.MaxTasks)
	}
	return nil
}

// checkTaskCreates checks a v1 create request's size and field lengths
// before anything is looked up.
func (l Limits) checkTaskCreates(tcs []api.TaskCreate) error {
	if err := l.checkTaskCount("(body)", len(tcs)); err != nil {
		return err
	}
	for i, tc := range tcs {
		p := fmt.Sprintf("[%d].", i)
		if err := checkLens(MaxUIDLen, p+"src_pod_uid", tc.SrcPodUID, p+"dst_pod_uid", tc.DstPodUID); err != nil {
			return err
		}
		if err := checkLens(MaxNameLen, p+"src_pod_ip", tc.SrcPodIP, p+"dst_pod_ip", tc.DstPodIP, p+"task_type", tc.TaskType); err != nil {
			return err
		}
	}
	return nil
}

// checkRunCreate checks a v2 run's size and field lengths before anything
// is looked up.
func (l Limits) checkRunCreate(rc api.RunCreate) error {
	if err := l.checkTaskCount("tasks", len(rc.Tasks)); err != nil {
		return err
	}
	if err := checkLen("suite", rc.Suite, MaxNameLen); err != nil {
		return err
	}
	if err := checkLen("params", string(rc.Params), MaxParamsLen); err != nil {
		return err
	}
	for i, rt := range rc.Tasks {
		p := fmt.Sprintf("tasks[%d].", i)
		if err := checkLens(MaxNameLen, p+"src", rt.Src, p+"dst", rt.Dst, p+"type", rt.Type); err != nil {
			return err
		}
	}
	return nil
}

// checkRunsInFlight refuses a new run while the user token has as many
// unfinished runs as allowed. (One user token today, so all runs count.
// Two creates racing may both pass: the limit is a bound on load, not an
// exact count.)
func (s *Server) checkRunsInFlight(ctx context.Context) error {
	n, err := s.st.CountRuns(ctx, store.RunFilter{State: store.RunRunning})
	if err != nil {
		return fmt.Errorf("count runs in flight: %w", err)
	}
	if n >= s.opts.Limits.MaxRunsInFlight {
		return overLimit("runs_in_flight", "%d runs in flight: at most %d per user token (--max-runs-in-flight); wait for one to finish or cancel one", n, s.opts.Limits.MaxRunsInFlight)
	}
	return nil
}
