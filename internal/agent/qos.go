package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/qos"
)

// applyQoS applies the task's QoS set-up on the agent's own interface (the
// one holding its pod IP). It returns a note saying what was applied and
// an undo that removes it again and reports how that went. Tasks with a
// set-up run one at a time: a second waits until the first removed its.
func (a *Agent) applyQoS(ctx context.Context, log *slog.Logger, t api.AgentTask) (note string, undo func() error, err error) {
	spec := *t.QoS
	setup, err := qos.Build(spec)
	if err != nil {
		return "", nil, fmt.Errorf("qos set-up refused: %w", err)
	}
	if a.id.HostNetwork {
		return "", nil, errors.New("qos set-up refused: the agent runs in the host network and will not change the node's interface")
	}
	ip, err := netip.ParseAddr(a.id.PodIP)
	if err != nil {
		return "", nil, fmt.Errorf("qos: pod IP %q: %w", a.id.PodIP, err)
	}
	select {
	case a.qosSlot <- struct{}{}:
	case <-ctx.Done():
		return "", nil, fmt.Errorf("qos: waiting for another task's set-up to end: %w", ctx.Err())
	}
	release := func() { <-a.qosSlot }
	link, err := qos.LinkWithAddr("", ip)
	if err != nil {
		release()
		return "", nil, fmt.Errorf("qos: find the agent's interface: %w", err)
	}
	target := qos.Target{Link: link}
	if err := qos.Apply(ctx, target, setup); err != nil {
		release()
		// An *qos.UnsupportedError already reads "unsupported: kernel
		// lacks the prio qdisc"; a refusal for want of privilege is
		// said plainly.
		var ue *qos.UnsupportedError
		if !errors.As(err, &ue) && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) {
			return "", nil, fmt.Errorf("qos %s on %s: the agent lacks NET_ADMIN (give its container the NET_ADMIN capability): %w", spec.Setup, link, err)
		}
		return "", nil, err
	}
	note = fmt.Sprintf("qos: applied %s on %s for the probe, removed afterwards", spec, link)
	log.Info("qos applied", "setup", spec.String(), "link", link)
	undo = func() error {
		defer release()
		if err := qos.Remove(target, setup); err != nil {
			log.Warn("qos remove failed", "link", link, "err", err)
			return err
		}
		log.Info("qos removed", "link", link)
		return nil
	}
	return note, undo, nil
}
