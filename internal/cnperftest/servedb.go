package cnperftest

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/cnperf/cnperf/internal/api/client"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
)

// ServeDB serves a lab run's SQLite database again (cnperf lab run --db
// FILE) with a fresh server whose user token is "user", as `cnperf
// server --db sqlite:FILE` would, and returns its URL and a client; both
// are closed when the test ends. Tests read stored runs back through it.
func ServeDB(t testing.TB, db string) (string, *client.Client) {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+db)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Store: st, UserToken: "user", AgentToken: "agent"})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); st.Close() })
	c, err := client.New(hs.URL, "user")
	if err != nil {
		t.Fatal(err)
	}
	return hs.URL, c
}
