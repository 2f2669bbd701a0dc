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

// usesQoSSlot says whether a set-up waits for the agent's one QoS slot:
// every qdisc set-up does (one at a time on the agent's interface);
// vxlan-inherit changes the node's VXLAN devices, no qdisc, and is held
// beside the node qdisc of the same phase (qos-priority's vxlan-inherit
// variant holds both on the sending node's host agent), so it must not
// wait for that hold to end.
func usesQoSSlot(setup string) bool { return setup != qos.SpecVXLANInherit }

// applyQoS applies the task's QoS set-up on the agent's own interface (the
// one holding its pod IP), or, for a qos-hold task given to a
// host-network agent, on the node's interface of its route to the
// destination agent. It returns a note saying what was applied and an
// undo that removes it again and reports how that went. Tasks with a
// set-up run one at a time: a second waits until the first removed its.
func (a *Agent) applyQoS(ctx context.Context, log *slog.Logger, t api.AgentTask) (note string, undo func() error, err error) {
	spec := *t.QoS
	setup, err := qos.Build(spec)
	if err != nil {
		return "", nil, fmt.Errorf("qos set-up refused: %w", err)
	}
	findLink := func() (string, error) {
		ip, err := netip.ParseAddr(a.id.PodIP)
		if err != nil {
			return "", fmt.Errorf("qos: pod IP %q: %w", a.id.PodIP, err)
		}
		return qos.LinkWithAddr("", ip)
	}
	if a.id.HostNetwork {
		if t.Type != api.TypeQoSHold {
			return "", nil, errors.New("qos set-up refused: the agent runs in the host network and will not change the node's interface (only a qos-hold task, which names the node's interface toward its destination, does)")
		}
		dst, err := netip.ParseAddr(t.DstPodIP)
		if err != nil {
			return "", nil, fmt.Errorf("qos: destination IP %q: %w", t.DstPodIP, err)
		}
		findLink = func() (string, error) { return qos.LinkToward("", dst) }
	}
	release := func() {}
	if usesQoSSlot(spec.Setup) {
		select {
		case a.qosSlot <- struct{}{}:
		case <-ctx.Done():
			return "", nil, fmt.Errorf("qos: waiting for another task's set-up to end: %w", ctx.Err())
		}
		release = func() { <-a.qosSlot }
	}
	link, err := findLink()
	if err != nil {
		release()
		return "", nil, fmt.Errorf("qos: find the agent's interface: %w", err)
	}
	target := qos.Target{Link: link}
	if a.id.HostNetwork && spec.Setup != qos.SpecVXLANInherit {
		// The node's interface: never replace a qdisc someone put there
		// (the kernel's default root has handle 0:0). vxlan-inherit
		// changes the node's VXLAN devices, no qdisc.
		st, err := qos.Show(target)
		if err != nil {
			release()
			return "", nil, fmt.Errorf("qos: read the node's interface %s: %w", link, err)
		}
		if r, ok := st.Root(); ok && r.Handle != "0:0" {
			release()
			return "", nil, fmt.Errorf("qos set-up refused: the node's interface %s already has a root qdisc of its own (%s %s), which cnperf will not replace", link, r.Kind, r.Handle)
		}
	}
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
