package k8stest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStartSupervised: a component that exits with a restart code is
// started again (as kubelet restarts Felix after its exit 129) until it
// keeps running, and stopping it ends it for good; any other exit ends it
// with its error, unrestarted.
func TestStartSupervised(t *testing.T) {
	c := &Cluster{RunDir: t.TempDir()}
	count := filepath.Join(c.RunDir, "count")
	// Exits 129 on its first two runs, then stays up.
	script := `n=$(cat "$1" 2>/dev/null || echo 0); n=$((n+1)); echo $n >"$1"; [ $n -le 2 ] && exit 129; exec sleep 60`
	p, err := c.startSupervised("flappy", []int{129}, "sh", "-c", script, "sh", count)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(count)
		if strings.TrimSpace(string(b)) == "3" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not restarted twice in 20s (count %q)", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-p.done:
		t.Fatalf("ended after its restarts: %v", p.err)
	case <-time.After(200 * time.Millisecond):
	}
	p.mu.Lock()
	restarts := p.restarts
	p.mu.Unlock()
	if restarts != 2 {
		t.Errorf("restarts %d, want 2", restarts)
	}
	c.stop(p)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("still running after stop")
	}
	if log, _ := os.ReadFile(p.log); strings.Count(string(log), "exited with 129; restarting") != 2 {
		t.Errorf("log does not say both restarts:\n%s", log)
	}

	q, err := c.startSupervised("failing", []int{129}, "sh", "-c", "exit 3")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-q.done:
	case <-time.After(10 * time.Second):
		t.Fatal("an exit that is not a restart code did not end it")
	}
	if q.err == nil || q.restarts != 0 || !strings.Contains(c.exited(), "failing exited") {
		t.Errorf("err %v restarts %d exited %q", q.err, q.restarts, c.exited())
	}
}
