package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/suite"
)

// RunReader is the part of the server's API an availability count reads;
// *client.Client implements it.
type RunReader interface {
	ListRunsWhere(ctx context.Context, q client.RunQuery) (api.RunPage, error)
	GetRun(ctx context.Context, id string) (api.Run, error)
}

// Availability counts the ping mesh's echo requests and answers over the
// window ending at now, from the rounds the server stored (mesh runs are
// ordinary runs: each round's pings are tasks with their results), for
// one path kind (connection, as the rounds' steps name it; "" for all).
// A ping that succeeded adds its packets sent and received; one that
// failed or timed out adds its requests as unanswered (the mesh could not
// reach the peer); cancelled and unfinished ones add nothing. The window
// reads only the rounds created in it, so the work is bounded by the
// window over the mesh's interval, however long the server has run.
func Availability(ctx context.Context, rr RunReader, window time.Duration, now time.Time, connection string) (suite.MeshAvailability, error) {
	out := suite.MeshAvailability{Window: probe.Duration(window)}
	since := now.Add(-window)
	var oldest time.Time
	after := ""
	for {
		page, err := rr.ListRunsWhere(ctx, client.RunQuery{Suite: Suite, Since: since, Limit: 1000, After: after})
		if err != nil {
			return out, fmt.Errorf("list the mesh's rounds: %w", err)
		}
		for _, r := range page.Runs {
			if r.CreatedAt.Before(since) || r.CreatedAt.After(now) {
				continue
			}
			run, err := rr.GetRun(ctx, r.ID)
			if err != nil {
				return out, fmt.Errorf("mesh round %s: %w", r.ID, err)
			}
			if n := countRound(run, connection, &out); n > 0 {
				out.Rounds++
				if oldest.IsZero() || run.CreatedAt.Before(oldest) {
					oldest = run.CreatedAt
				}
			}
		}
		if page.NextAfter == "" || len(page.Runs) == 0 {
			break
		}
		after = page.NextAfter
	}
	if !oldest.IsZero() {
		out.Covered = probe.Duration(min(now.Sub(oldest), window))
	}
	return out, nil
}

// countRound adds one round's pings (of the connection, when given) to a
// and returns how many it counted.
func countRound(run api.Run, connection string, a *suite.MeshAvailability) int {
	var params suite.RunParams
	_ = json.Unmarshal(run.Params, &params) // without params no connection can match
	tasks := append([]api.TaskV2(nil), run.Tasks...)
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].ID < tasks[j].ID }) // creation order: the steps'
	n := 0
	for i, t := range tasks {
		if connection != "" && (i >= len(params.Steps) || params.Steps[i].Connection != connection) {
			continue
		}
		var spec probe.Spec
		if err := json.Unmarshal(t.Spec, &spec); err != nil || (spec.Kind != probe.KindPing && spec.Kind != probe.KindStamp) {
			continue
		}
		switch t.State {
		case api.StateSucceeded:
			var res probe.Result
			if err := json.Unmarshal(t.Result, &res); err != nil {
				continue
			}
			switch {
			case res.Packets != nil:
				a.Sent += res.Packets.Sent
				a.Received += res.Packets.Received
			case res.LossPct != nil && spec.Count > 0:
				// A result stored before pings carried their counts: the
				// requests asked for, less the loss.
				a.Sent += int64(spec.Count)
				a.Received += int64(math.Round(float64(spec.Count) * (1 - *res.LossPct/100)))
			default:
				continue
			}
		case api.StateFailed, api.StateTimedOut:
			a.Sent += int64(max(spec.Count, 1))
			a.Failed++
		default:
			continue
		}
		a.Probes++
		n++
	}
	return n
}
