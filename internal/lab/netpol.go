package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/cnperf/cnperf/internal/nsthread"
)

// Policies are NetworkPolicy-like ingress rules for one pod, as the lab's
// policy controller makes them: Count policies, Selecting of which allow
// TCP from the pod From to Port of the pod, the others allowing only
// addresses of no lab pod (TEST-NET ranges); Deny adds a policy that
// selects the pod and allows nothing.
type Policies struct {
	Count, Selecting int
	From             string
	Port             int
	Deny             bool
}

// policyChainPrefix names the lab's policy chains (one per pod).
const policyChainPrefix = "CNPERF-NP-"

// policyChain is pod's chain: at most 28 characters, as iptables allows.
func policyChain(pod string) (string, error) {
	c := policyChainPrefix + pod
	if len(c) > 28 || strings.ContainsAny(c, " \t\n") {
		return "", fmt.Errorf("pod name %q is too long for a policy chain", pod)
	}
	return c, nil
}

// policyRules renders the policies for the pod at podIP as
// iptables-restore input for the filter table of the pod's node: a chain
// that accepts established flows first (as an iptables CNI does: a new
// policy decides new connections), then one rule per policy in order
// (the lab's controller is a linear chain, so every new connection to the
// pod walks the policies that do not select it), then DROP when any
// policy selects the pod (else RETURN), and a jump to it from FORWARD
// for traffic to the pod.
func policyRules(chain, podIP, fromIP string, p Policies) string {
	var b strings.Builder
	b.WriteString("*filter\n:" + chain + " - [0:0]\n")
	fmt.Fprintf(&b, "-A %s -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n", chain)
	for i := 0; i < p.Count-p.Selecting; i++ {
		fmt.Fprintf(&b, "-A %s -s 192.0.2.%d/32 -d 198.51.100.%d/32 -p tcp --dport %d -j ACCEPT\n", chain, 1+i%254, 1+(i/254)%254, 1024+i)
	}
	for i := 0; i < p.Selecting; i++ {
		fmt.Fprintf(&b, "-A %s -s %s/32 -p tcp --dport %d -j ACCEPT\n", chain, fromIP, p.Port)
	}
	if p.Selecting > 0 || p.Deny {
		fmt.Fprintf(&b, "-A %s -j DROP\n", chain)
	} else {
		fmt.Fprintf(&b, "-A %s -j RETURN\n", chain)
	}
	fmt.Fprintf(&b, "-I FORWARD 1 -d %s/32 -j %s\nCOMMIT\n", podIP, chain)
	return b.String()
}

// AddPolicies makes the policies for pod in its node's namespace (the
// node that routes traffic to it) with one iptables-restore, replacing
// any the pod had, and returns their undo. Nothing is changed outside
// the lab's node namespaces; lab down removes them with the namespaces.
func (l *Lab) AddPolicies(ctx context.Context, pod string, p Policies) (func(context.Context) error, error) {
	dst, ok := l.Pod(pod)
	if !ok {
		return nil, fmt.Errorf("lab %s has no pod %q", l.Name, pod)
	}
	from := ""
	if p.Selecting > 0 {
		src, ok := l.Pod(p.From)
		if !ok {
			return nil, fmt.Errorf("lab %s has no pod %q to allow", l.Name, p.From)
		}
		from = src.IP.Addr().String()
	}
	if p.Count < 0 || p.Selecting < 0 || p.Selecting > p.Count || p.Count > 254*254 || p.Count+1024 > 65535 {
		return nil, fmt.Errorf("policies %d (selecting %d): want 0-%d, selecting at most all", p.Count, p.Selecting, 65535-1024)
	}
	chain, err := policyChain(pod)
	if err != nil {
		return nil, err
	}
	n, _ := l.Node(dst.Node)
	ip := dst.IP.Addr().String()
	undo := func(ctx context.Context) error { return l.removePolicies(ctx, n, chain, ip) }
	_ = undo(ctx) // a run killed before its undo left them
	if err := l.iptablesRestore(ctx, n, policyRules(chain, ip, from, p)); err != nil {
		return nil, errors.Join(fmt.Errorf("policies for pod %s: %w", pod, err), undo(context.WithoutCancel(ctx)))
	}
	l.log.Info("policies added", "pod", pod, "count", p.Count, "selecting", p.Selecting, "deny", p.Deny)
	return undo, nil
}

// removePolicies removes pod's chain and every jump to it; a chain that
// is not there is no error.
func (l *Lab) removePolicies(ctx context.Context, n Node, chain, podIP string) error {
	bin, err := iptablesPath()
	if err != nil {
		return err
	}
	jump := []string{"FORWARD", "-d", podIP + "/32", "-j", chain}
	for i := 0; i < 10 && l.iptablesFilter(ctx, bin, n, "-C", jump) == nil; i++ {
		if err := l.iptablesFilter(ctx, bin, n, "-D", jump); err != nil {
			return err
		}
	}
	if l.iptablesFilter(ctx, bin, n, "-L", []string{chain, "-n"}) != nil {
		return nil // no chain
	}
	if err := l.iptablesFilter(ctx, bin, n, "-F", []string{chain}); err != nil {
		return err
	}
	return l.iptablesFilter(ctx, bin, n, "-X", []string{chain})
}

// iptablesFilter runs one iptables command on the filter table in node
// n's namespace, without a shell; only the commands policies use.
func (l *Lab) iptablesFilter(ctx context.Context, bin string, n Node, cmd string, args []string) error {
	switch cmd {
	case "-C", "-D", "-F", "-X", "-L":
	default:
		return fmt.Errorf("iptables command %q is not one the lab's policies use", cmd)
	}
	return l.inNode(ctx, n, exec.CommandContext(ctx, bin, append([]string{"-w", "5", "-t", "filter", cmd}, args...)...), nil)
}

// iptablesRestore feeds rules to iptables-restore --noflush in node n's
// namespace.
func (l *Lab) iptablesRestore(ctx context.Context, n Node, rules string) error {
	bin, err := iptablesPath()
	if err != nil {
		return err
	}
	restore := filepath.Join(filepath.Dir(bin), "iptables-restore")
	if _, err := exec.LookPath(restore); err != nil {
		return fmt.Errorf("the lab's policies need iptables-restore beside %s: %w", bin, err)
	}
	ctx, cancel := context.WithTimeout(ctx, iptablesTimeout)
	defer cancel()
	return l.inNode(ctx, n, exec.CommandContext(ctx, restore, "-w", "5", "--noflush"), strings.NewReader(rules))
}

// inNode starts c inside node n's namespace (never the host's) and waits
// for it, bounded by iptablesTimeout.
func (l *Lab) inNode(ctx context.Context, n Node, c *exec.Cmd, stdin *strings.Reader) error {
	if !strings.HasPrefix(n.NS, Prefix(l.Name)) {
		return fmt.Errorf("namespace %q is not lab %s's", n.NS, l.Name)
	}
	if stdin != nil {
		c.Stdin = stdin
	}
	var stderr bytes.Buffer
	c.Stderr = &stderr
	h, err := netns.GetFromName(n.NS)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", n.NS, err)
	}
	err = nsthread.Do(h, n.NS, c.Start)
	_ = h.Close()
	if err != nil {
		return fmt.Errorf("start %s in %s: %w", filepath.Base(c.Path), n.Name, err)
	}
	if err := c.Wait(); err != nil {
		return fmt.Errorf("%s %s in %s: %w: %s", filepath.Base(c.Path), strings.Join(c.Args[1:], " "), n.Name, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// PolicyChainRules counts the rules of pod's policy chain in its node's
// namespace (0 when there is none), for tests.
func (l *Lab) PolicyChainRules(ctx context.Context, pod string) (int, error) {
	dst, ok := l.Pod(pod)
	if !ok {
		return 0, fmt.Errorf("lab %s has no pod %q", l.Name, pod)
	}
	chain, err := policyChain(pod)
	if err != nil {
		return 0, err
	}
	bin, err := iptablesPath()
	if err != nil {
		return 0, err
	}
	n, _ := l.Node(dst.Node)
	save := filepath.Join(filepath.Dir(bin), "iptables-save")
	ctx, cancel := context.WithTimeout(ctx, iptablesTimeout)
	defer cancel()
	c := exec.CommandContext(ctx, save, "-t", "filter")
	var out bytes.Buffer
	c.Stdout = &out
	if err := l.inNode(ctx, n, c, nil); err != nil {
		return 0, err
	}
	count := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "-A "+chain+" ") || strings.HasPrefix(line, "-A FORWARD ") && strings.HasSuffix(line, "-j "+chain) {
			count++
		}
	}
	return count, nil
}
