// Package nsthread runs code inside a network namespace on a locked OS
// thread of its own and switches that thread back afterwards, so the
// caller's thread never changes namespace. Sockets and netlink handles made
// inside stay in the namespace they were made in.
//
// It guarantees that no other code ever runs on a thread left in the wrong
// namespace: a thread that cannot be switched back stays locked and Go
// retires it with its goroutine. It needs CAP_SYS_ADMIN (setns, unshare).
package nsthread

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn on a locked thread switched into ns, and switches back. name
// labels ns in errors ("" for none). fn must not start goroutines that
// expect to be in ns. If fn exits without returning (t.FailNow or
// runtime.Goexit), Do returns an error saying so instead of waiting forever.
func Do(ns netns.NsHandle, name string, fn func() error) error {
	return onThread(name, func() error {
		if err := netns.Set(ns); err != nil {
			return fmt.Errorf("enter netns%s: %w", label(name), err)
		}
		return nil
	}, fn)
}

// Create makes a network namespace (named name under /var/run/netns, or an
// unnamed one that disappears when its last handle and socket close when
// name is ""), runs fn inside it when fn is not nil, switches back and
// returns the namespace's handle. On an error the handle is closed (a named
// namespace's mount stays for its owner to delete).
func Create(name string, fn func() error) (netns.NsHandle, error) {
	h := netns.None()
	err := onThread(name, func() error {
		var err error
		if name == "" {
			h, err = netns.New() // switches this thread
		} else {
			h, err = netns.NewNamed(name) // switches this thread
		}
		if err != nil {
			return fmt.Errorf("create netns%s: %w", label(name), err)
		}
		return nil
	}, fn)
	if err != nil {
		if h.IsOpen() {
			_ = h.Close()
		}
		return netns.None(), err
	}
	return h, nil
}

// onThread runs enter and then fn (when enter succeeded and fn is set) on
// a new locked thread, and switches the thread back to the namespace it
// started in.
func onThread(name string, enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if !returned {
				errc <- fmt.Errorf("in netns%s: the function exited without returning (t.FailNow or runtime.Goexit inside it)", label(name))
			}
		}()
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			returned = true
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current netns: %w", err)
			return
		}
		defer orig.Close()
		err = enter()
		if err == nil && fn != nil {
			err = fn()
		}
		returned = true
		if serr := netns.Set(orig); serr != nil {
			// The thread stays locked: Go retires it with this goroutine.
			errc <- errors.Join(err, fmt.Errorf("restore netns: %w", serr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

func label(name string) string {
	if name == "" {
		return ""
	}
	return " " + name
}
