package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"time"
)

// ServiceCIDR is the lab's ClusterIP range, as kube-proxy's service CIDR:
// addresses that exist only in the DNAT rules of the lab's node
// namespaces, never on a device and never outside the lab.
var ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")

// serviceComment marks the lab's Service rules.
const serviceComment = "cnperf-lab-service"

// iptablesTimeout bounds one iptables call.
const iptablesTimeout = 10 * time.Second

// A Service is a ClusterIP-style Service of the lab: ClusterIP:Port, TCP
// and UDP, DNATed to the same port of one pod, in every node namespace,
// as kube-proxy's iptables mode does it.
type Service struct {
	Pod       string     `json:"pod"`
	ClusterIP netip.Addr `json:"cluster_ip"`
	PodIP     netip.Addr `json:"pod_ip"`
	Port      int        `json:"port"`
}

// Addr is the Service's IP:PORT.
func (s Service) Addr() string {
	return netip.AddrPortFrom(s.ClusterIP, uint16(s.Port)).String()
}

// ServiceFor returns the Service the lab makes in front of pod on port
// (not yet made): its ClusterIP is fixed by the pod (node K's pod j gets
// 10.96.K.(j+1), the last octet of its pod IP), so one pod has one
// ClusterIP in every run.
func (l *Lab) ServiceFor(pod string, port int) (Service, error) {
	p, ok := l.Pod(pod)
	if !ok {
		return Service{}, fmt.Errorf("lab %s has no pod %q (pods are like n1-p1)", l.Name, pod)
	}
	if port < 1 || port > 65535 {
		return Service{}, fmt.Errorf("service port %d: want 1-65535", port)
	}
	n, _ := l.Node(p.Node)
	if n.Index > 255 {
		return Service{}, fmt.Errorf("pod %s is on node %d: the lab's ClusterIP range %s holds nodes 1-255", pod, n.Index, ServiceCIDR)
	}
	for _, c := range []netip.Prefix{l.Config.PodCIDR, l.Config.UnderlayCIDR} {
		if c.Overlaps(ServiceCIDR) {
			return Service{}, fmt.Errorf("the lab's ClusterIP range %s overlaps its CIDR %s: choose another pod or underlay CIDR", ServiceCIDR, c)
		}
	}
	ip := p.IP.Addr().As4()
	cip := ServiceCIDR.Addr().As4()
	cip[2], cip[3] = byte(n.Index), ip[3]
	return Service{Pod: pod, ClusterIP: netip.AddrFrom4(cip), PodIP: p.IP.Addr(), Port: port}, nil
}

// AddService makes a Service in front of pod on port (see Service): DNAT
// rules in the nat table's PREROUTING (pods' traffic) and OUTPUT
// (host-network processes) chains of every node namespace, for TCP and
// UDP. Replies come from the pod's IP and conntrack, in the namespace of
// the client's node, turns them back into the ClusterIP's, as on a
// cluster. Rules already there (a run killed before its undo) are not
// added twice. Nothing is changed outside the lab's node namespaces; lab
// down removes the rules with the namespaces.
func (l *Lab) AddService(ctx context.Context, pod string, port int) (Service, error) {
	svc, err := l.ServiceFor(pod, port)
	if err != nil {
		return svc, err
	}
	bin, err := iptablesPath()
	if err != nil {
		return svc, err
	}
	var added []func() error
	undo := func() error {
		var errs []error
		for i := len(added) - 1; i >= 0; i-- {
			errs = append(errs, added[i]())
		}
		return errors.Join(errs...)
	}
	for _, n := range l.Nodes {
		for _, rule := range svc.rules() {
			if l.iptables(ctx, bin, n, "-C", rule) == nil {
				continue
			}
			if err := l.iptables(ctx, bin, n, "-A", rule); err != nil {
				return svc, errors.Join(fmt.Errorf("service %s for pod %s: %w", svc.Addr(), pod, err), undo())
			}
			added = append(added, func() error { return l.iptables(context.WithoutCancel(ctx), bin, n, "-D", rule) })
		}
	}
	l.log.Info("service added", "cluster_ip", svc.Addr(), "pod", pod, "pod_ip", svc.PodIP)
	return svc, nil
}

// RemoveService removes the rules of svc from every node namespace (every
// copy of them), and says which it could not remove.
func (l *Lab) RemoveService(ctx context.Context, svc Service) error {
	bin, err := iptablesPath()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range l.Nodes {
		for _, rule := range svc.rules() {
			for i := 0; i < 10 && l.iptables(ctx, bin, n, "-C", rule) == nil; i++ {
				if err := l.iptables(ctx, bin, n, "-D", rule); err != nil {
					errs = append(errs, err)
					break
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove service %s: %w", svc.Addr(), err)
	}
	l.log.Info("service removed", "cluster_ip", svc.Addr(), "pod", svc.Pod)
	return nil
}

// rules are the Service's rules as iptables arguments after the command
// (-A, -C, -D): a chain and the match, built only from the lab's
// addresses and the port.
func (s Service) rules() [][]string {
	var out [][]string
	port := strconv.Itoa(s.Port)
	to := netip.AddrPortFrom(s.PodIP, uint16(s.Port)).String()
	for _, chain := range []string{"PREROUTING", "OUTPUT"} {
		for _, proto := range []string{"tcp", "udp"} {
			out = append(out, []string{chain, "-d", s.ClusterIP.String() + "/32", "-p", proto, "--dport", port,
				"-m", "comment", "--comment", serviceComment, "-j", "DNAT", "--to-destination", to})
		}
	}
	return out
}

// iptablesPath finds iptables (Debian's iptables package; /usr/sbin may
// not be on a user's PATH).
func iptablesPath() (string, error) {
	if p, err := exec.LookPath("iptables"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/iptables", "/sbin/iptables"} {
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("the lab's Services need iptables (Debian package iptables), and it is not installed")
}

// ServicesAvailable says why the lab cannot make Services here, or nil.
func ServicesAvailable() error {
	_, err := iptablesPath()
	return err
}

// iptables runs one iptables command on the nat table inside node n's
// namespace (never the host's), without a shell. Only the commands the
// Service rules use are allowed.
func (l *Lab) iptables(ctx context.Context, bin string, n Node, cmd string, rule []string) error {
	switch cmd {
	case "-A", "-C", "-D":
	default:
		return fmt.Errorf("iptables command %q is not one the lab uses", cmd)
	}
	ctx, cancel := context.WithTimeout(ctx, iptablesTimeout)
	defer cancel()
	args := append([]string{"-w", "5", "-t", "nat", cmd}, rule...)
	return l.inNode(ctx, n, exec.CommandContext(ctx, bin, args...), nil) //nolint:gosec // fixed flags and lab addresses, no shell
}
