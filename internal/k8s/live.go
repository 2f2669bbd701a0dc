package k8s

import (
	"context"
	"sort"
	"strconv"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// LiveAPI is the server's API as a suite on Kubernetes sees it: only the
// agents whose pods run now (a deleted pod's agent stays listed on the
// server until its heartbeats are missed), and no shaped pods a former
// run left behind.
type LiveAPI struct {
	ServerAPI
	Live map[string]bool // pod uids running now
}

// Agents lists the server's agents whose pods run now.
func (l LiveAPI) Agents(ctx context.Context, all bool) ([]api.Agent, error) {
	as, err := l.ServerAPI.Agents(ctx, all)
	if err != nil {
		return nil, err
	}
	var out []api.Agent
	for _, a := range as {
		if l.Live[a.PodUID] {
			out = append(out, a)
		}
	}
	return out, nil
}

// WaitOnline waits until the agent of every running pod in Live is online
// at the server, polling every `every`, for at most bound. A pod is Ready
// once its responder listens, which can be seconds before its agent has
// registered (the agent may be in its reconnect back-off after a server
// restart); a suite planned then would leave that agent's connections out.
// It returns the uids still missing when bound passed (nil when none), or
// the error of the last listing when no listing succeeded.
func (l LiveAPI) WaitOnline(ctx context.Context, bound, every time.Duration) ([]string, error) {
	deadline := time.Now().Add(bound)
	var lastErr error
	listed := false
	var missing []string
	for {
		as, err := l.ServerAPI.Agents(ctx, false)
		if err != nil {
			lastErr = err
		} else {
			listed = true
			online := map[string]bool{}
			for _, a := range as {
				if a.Status != "offline" {
					online[a.PodUID] = true
				}
			}
			missing = missing[:0]
			for uid, ok := range l.Live {
				if ok && !online[uid] {
					missing = append(missing, uid)
				}
			}
			if len(missing) == 0 {
				return nil, nil
			}
		}
		if !time.Now().Add(every).Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return missing, ctx.Err()
		case <-time.After(every):
		}
	}
	if !listed {
		return nil, lastErr
	}
	sort.Strings(missing)
	return missing, nil
}

// Live returns the uids of running agent pods, shaped ones left out.
func (c *Client) Live(ctx context.Context) (map[string]bool, error) {
	as, err := c.Agents(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, a := range as {
		if a.Component != "shaped" {
			out[a.UID] = true
		}
	}
	return out, nil
}

// DescribeQdiscs sums up the qdiscs found, one link per line, as tc would.
func DescribeQdiscs(links []LinkTC) []string {
	var out []string
	for _, l := range links {
		s := l.Name + " (" + l.Type + ", mtu " + strconv.Itoa(l.MTU) + "):"
		for _, q := range l.Qdiscs {
			s += " " + q.String() + ";"
		}
		if l.RedirectTo != "" {
			s += " ingress filter redirects to " + l.RedirectTo + ";"
		}
		out = append(out, s)
	}
	return out
}
