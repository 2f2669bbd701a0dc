package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"

	"github.com/vishvananda/netns"

	"github.com/cnperf/cnperf/internal/nsthread"
)

// Exec runs argv inside the namespace of a pod, a node or "underlay", with
// the given standard streams, and waits for it. argv[0] is looked up in
// PATH and run directly, never through a shell. A command that exits
// non-zero returns an *exec.ExitError.
func (l *Lab) Exec(ctx context.Context, target string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(argv) == 0 {
		return errors.New("exec: no command given")
	}
	nsName, err := l.NSOf(target)
	if err != nil {
		return err
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...) //nolint:gosec // argv from the user, no shell
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", nsName, err)
	}
	err = nsthread.Do(ns, nsName, cmd.Start)
	_ = ns.Close()
	if err != nil {
		return fmt.Errorf("start %s in %s: %w", argv[0], target, err)
	}
	return cmd.Wait()
}

// Do runs fn on a thread inside the namespace of a pod, a node or
// "underlay" (see the package function Do).
func (l *Lab) Do(target string, fn func() error) error {
	nsName, err := l.NSOf(target)
	if err != nil {
		return err
	}
	return Do(nsName, fn)
}
