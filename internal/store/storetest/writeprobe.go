package storetest

import (
	"context"
	"testing"

	"github.com/cnperf/cnperf/internal/store"
)

// testCheckWrite: the write probe passes again and again on a working
// store (the readiness endpoint calls it every few seconds).
func testCheckWrite(t *testing.T, st store.Store) {
	ctx := context.Background()
	for i := range 3 {
		if err := st.CheckWrite(ctx); err != nil {
			t.Fatalf("CheckWrite %d: %v", i, err)
		}
	}
}
