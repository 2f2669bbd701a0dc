package server

import (
	"encoding/json"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/qos"
	"github.com/cnperf/cnperf/internal/store"
)

func clientV1(a store.Agent) api.Client {
	return api.Client{
		ID: a.ID, PodName: a.PodName, PodUID: a.PodUID, PodIP: a.PodIP, NodeName: a.NodeName, NodeIP: a.NodeIP,
		ClientStatus: int(a.Status), RegisterTime: a.RegisterTime, UpdateTime: a.LastHeartbeat,
	}
}

func agentV2(a store.Agent) api.Agent {
	return api.Agent{
		ID: a.ID, PodUID: a.PodUID, PodName: a.PodName, PodNamespace: a.PodNamespace, PodIP: a.PodIP,
		NodeName: a.NodeName, NodeIP: a.NodeIP, HostNetwork: a.HostNetwork, ResponderAddr: a.ResponderAddr,
		Version: a.Version, NodeLabels: a.NodeLabels, Status: a.Status.String(), RegisterTime: a.RegisterTime, LastHeartbeat: a.LastHeartbeat,
	}
}

// taskV1 converts a task to the seed's shape; raw is its tool output
// (TaskResult), read apart from the task.
func taskV1(t store.Task, raw string) api.Task {
	return api.Task{
		ID: t.ID, TaskID: t.TaskID,
		SrcPodUID: t.SrcPodUID, SrcPodID: t.SrcPodUID, SrcPodIP: t.SrcPodIP,
		DstPodUID: t.DstPodUID, DstPodID: t.DstPodUID, DstPodIP: t.DstPodIP,
		TaskParam: t.Param, TaskType: t.Type,
		TaskStatus: api.TaskStatusCode(string(t.State)), TaskState: string(t.State), TaskReason: t.Reason, TaskLateReason: t.LateReason,
		TaskResult: raw, CreateTime: t.CreatedAt, UpdateTime: t.UpdatedAt,
	}
}

func taskV2(t store.Task) api.TaskV2 {
	return api.TaskV2{
		ID: t.ID, TaskID: t.TaskID, RunID: t.RunID, Type: t.Type, Param: t.Param, Spec: t.Spec,
		SrcPodUID: t.SrcPodUID, SrcPodIP: t.SrcPodIP, DstPodUID: t.DstPodUID, DstPodIP: t.DstPodIP,
		State: string(t.State), Reason: t.Reason, LateReason: t.LateReason, Exclusive: t.Exclusive, TimeoutS: t.Timeout.Seconds(),
		RawSize: t.RawSize, Result: t.Result, CreatedAt: t.CreatedAt, DispatchedAt: t.DispatchedAt,
		StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, Deadline: t.Deadline, UpdatedAt: t.UpdatedAt,
		QoS: storedQoS(t.Spec), StoppedAt: t.StoppedAt, StopReason: t.StopReason,
	}
}

// storedQoS reads a probe task's QoS set-up, which the store keeps in the
// task's spec JSON under "qos" (beside the probe.Spec fields), so no
// schema change was needed. Nil when there is none.
func storedQoS(spec json.RawMessage) *qos.Spec {
	if len(spec) == 0 {
		return nil
	}
	var v struct {
		QoS *qos.Spec `json:"qos"`
	}
	if err := json.Unmarshal(spec, &v); err != nil {
		return nil
	}
	return v.QoS
}

func runV2(r store.Run, ts []store.Task) api.Run {
	out := api.Run{
		ID: r.ID, Suite: r.Suite, State: string(r.State), AllowConcurrency: r.AllowConcurrency, Params: r.Params,
		CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, Counts: map[string]int{},
	}
	for k, v := range r.Counts {
		out.Counts[string(k)] = v
	}
	for _, t := range ts {
		out.Tasks = append(out.Tasks, taskV2(t))
	}
	return out
}
