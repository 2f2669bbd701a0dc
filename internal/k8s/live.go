package k8s

import (
	"context"
	"strconv"

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
