package lab

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cnperf/cnperf/internal/ethtool"
	"github.com/cnperf/cnperf/internal/nsthread"
)

// linkWaitBound bounds the wait for the lab's links to carry traffic.
const linkWaitBound = 30 * time.Second

// waitLinksCarry returns when every veth the lab made, and every bridge
// of it with a port, is operationally up. The kernel's link watcher turns
// a new link's operational state, its transmit queue and a bridge's
// carrier on asynchronously, up to a second later (more on a busy
// machine); until then what is sent there is dropped, so a lab used at
// once lost its first packets (a first SYN waited a second for its
// retransmission). Asking each link whether it has a link (ethtool's
// GLINK) settles its pending change at once.
func waitLinksCarry(ctx context.Context, l *Lab) error {
	ctx, cancel := context.WithTimeout(ctx, linkWaitBound)
	defer cancel()
	byNS := map[string][]string{}
	var order []string
	for _, d := range l.Devices {
		if d.Kind != "veth" && d.Kind != "bridge" {
			continue
		}
		if _, ok := byNS[d.NS]; !ok {
			order = append(order, d.NS)
		}
		byNS[d.NS] = append(byNS[d.NS], d.Name)
	}
	for _, ns := range order {
		h, err := openNS(ns)
		if err != nil {
			return err
		}
		err = waitNSLinksCarry(ctx, h, byNS[ns])
		h.close()
		if err != nil {
			return fmt.Errorf("links in %s: %w", ns, err)
		}
	}
	return nil
}

// waitNSLinksCarry settles and polls the links devs of one namespace
// until they carry.
func waitNSLinksCarry(ctx context.Context, h *nsHandles, devs []string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	down := devs
	for {
		// Errors are the next check's to report: a link that does not
		// answer GLINK is still up once the link watcher has run.
		if err := nsthread.Do(h.ns, h.name, func() error {
			for _, dev := range down {
				_, _ = ethtool.Link(dev)
			}
			return nil
		}); err != nil {
			return err
		}
		var err error
		if down, err = linksNotCarrying(h, devs); err != nil || len(down) == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not operationally up: %w", strings.Join(down, ", "), ctx.Err())
		case <-tick.C:
		}
	}
}

// linksNotCarrying names those of devs that are not operationally up (a
// bridge without ports never is, and is not waited for).
func linksNotCarrying(h *nsHandles, devs []string) ([]string, error) {
	links, err := h.nl.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	hasPort := map[int]bool{}
	for _, k := range links {
		if m := k.Attrs().MasterIndex; m != 0 {
			hasPort[m] = true
		}
	}
	var down []string
	for _, dev := range devs {
		i := slices.IndexFunc(links, func(k netlink.Link) bool { return k.Attrs().Name == dev })
		if i < 0 {
			return nil, fmt.Errorf("link %s is gone", dev)
		}
		a := links[i].Attrs()
		if a.OperState == netlink.OperUp || links[i].Type() == "bridge" && !hasPort[a.Index] {
			continue
		}
		down = append(down, dev)
	}
	return down, nil
}
