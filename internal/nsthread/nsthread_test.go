package nsthread

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_SYS_ADMIN) to make network namespaces")
	}
}

// current returns the namespace of a fresh locked thread: the process's
// own, which Do and Create must leave as it was.
func current(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	h, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestCreateAndDo(t *testing.T) {
	needRoot(t)
	before := current(t)
	ns, err := Create("", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if ns.Equal(before) {
		t.Fatal("Create returned the caller's namespace")
	}
	var inside netns.NsHandle
	if err := Do(ns, "scratch", func() error {
		var err error
		inside, err = netns.Get()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	if !inside.Equal(ns) {
		t.Errorf("fn ran in %v, want %v", inside, ns)
	}
	if after := current(t); !after.Equal(before) {
		t.Errorf("a thread is in %v after Do, want %v", after, before)
	}
}

func TestErrors(t *testing.T) {
	needRoot(t)
	ns, err := Create("", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	boom := errors.New("boom")
	cases := []struct {
		name string
		run  func() error
		want string
	}{
		{"fn's error", func() error { return Do(ns, "x", func() error { return boom }) }, "boom"},
		{"fn exits without returning", func() error { return Do(ns, "x", func() error { runtime.Goexit(); return nil }) }, "in netns x: the function exited without returning"},
		{"closed namespace", func() error { return Do(netns.None(), "gone", func() error { return nil }) }, "enter netns gone"},
		{"Create with fn's error", func() error {
			h, err := Create("", func() error { return boom })
			if h.IsOpen() {
				t.Errorf("Create returned an open handle with error %v", err)
			}
			return err
		}, "boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestCreateNamed(t *testing.T) {
	needRoot(t)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "nsthread-" + hex.EncodeToString(b)
	ns, err := Create(name, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	})
	byName, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer byName.Close()
	if !byName.Equal(ns) {
		t.Errorf("/var/run/netns/%s is not the namespace Create returned", name)
	}
}
