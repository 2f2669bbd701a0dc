package storetest

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cnperf/cnperf/internal/store"
)

// testOutputChunks: an output read in chunks of characters (one, two and
// four bytes each, a chunk size that does not divide it) joins up to the
// output; past the end, and for a task with no output or none at all, a
// chunk is empty.
func testOutputChunks(t *testing.T, st store.Store) {
	ctx := context.Background()
	beat(t, st, "chunk-src", "chunk-n1", at(-8000))
	beat(t, st, "chunk-dst", "chunk-n2", at(-8000))
	t.Cleanup(func() { _, _ = st.MarkSilentOffline(ctx, at(-5000), at(-5000)) })
	ts := create(t, st, mkTask("chunk-src", "chunk-dst", "ping"), mkTask("chunk-src", "chunk-dst", "ping"))
	if got, err := st.ClaimTasks(ctx, "chunk-src", at(-7990), 2, 0); err != nil || len(got) != 2 {
		t.Fatalf("claim: %d (%v)", len(got), err)
	}
	raw := strings.Repeat("ascii é ✓ 𝄞 <&>\"\\\n", 500)
	if _, _, err := st.Complete(ctx, store.Report{TaskID: ts[0].TaskID, AgentUID: "chunk-src", ReportID: "c0", State: store.TaskSucceeded, RawResult: raw}, at(-7980)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Complete(ctx, store.Report{TaskID: ts[1].TaskID, AgentUID: "chunk-src", ReportID: "c1", State: store.TaskSucceeded}, at(-7980)); err != nil {
		t.Fatal(err)
	}
	const n = 997
	var b strings.Builder
	chunks := 0
	for off := int64(0); ; off += n {
		part, err := st.TaskOutputChunk(ctx, ts[0].TaskID, off, n)
		if err != nil {
			t.Fatalf("chunk at %d: %v", off, err)
		}
		if part == "" {
			break
		}
		if c := utf8.RuneCountInString(part); c > n || !utf8.ValidString(part) {
			t.Fatalf("chunk at %d: %d characters, valid UTF-8 %v", off, c, utf8.ValidString(part))
		}
		b.WriteString(part)
		chunks++
	}
	if b.String() != raw {
		t.Errorf("chunks joined: %d bytes in %d chunks, want the %d-byte output", b.Len(), chunks, len(raw))
	}
	for _, c := range []struct {
		id  string
		off int64
	}{{ts[0].TaskID, int64(utf8.RuneCountInString(raw))}, {ts[1].TaskID, 0}, {"no-such-task", 0}} {
		if part, err := st.TaskOutputChunk(ctx, c.id, c.off, n); err != nil || part != "" {
			t.Errorf("chunk of %s at %d: %q (%v), want empty", c.id, c.off, part, err)
		}
	}
}
