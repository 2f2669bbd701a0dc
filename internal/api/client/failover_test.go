package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// deadURL returns the URL of a port nothing listens on.
func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// TestFailover: a client given several URLs sends a request that cannot
// connect to the next replica at once, moves on after a 502/503/504 (the
// request itself fails, as it may have been carried out), stays on a
// replica that answers, and fails when none can be reached.
func TestFailover(t *testing.T) {
	var okHits, badHits atomic.Int32
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		okHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"r1"}`))
	}))
	defer ok.Close()
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		badHits.Add(1)
		http.Error(w, `{"error":"no backend"}`, http.StatusBadGateway)
	}))
	defer bad.Close()
	dead := deadURL(t)

	cases := []struct {
		name      string
		urls      []string
		wantErr   []bool // per call
		wantBase  string // in use after the calls
		wantOK    int32  // calls the live replica answered
		wantBadly int32  // calls the 502 replica answered
	}{
		{"dead first: next at once", []string{dead, ok.URL}, []bool{false, false}, ok.URL, 2, 0},
		{"502 first: that call fails, the next goes on", []string{bad.URL, ok.URL}, []bool{true, false, false}, ok.URL, 2, 1},
		{"stays on a live replica", []string{ok.URL, bad.URL}, []bool{false, false}, ok.URL, 2, 0},
		{"none reachable", []string{dead, deadURL(t)}, []bool{true}, "", 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			okHits.Store(0)
			badHits.Store(0)
			cl, err := New(strings.Join(c.urls, ","), "tok")
			if err != nil {
				t.Fatal(err)
			}
			for i, wantErr := range c.wantErr {
				_, err := cl.GetRunPage(context.Background(), "r1", 1, 0)
				if (err != nil) != wantErr {
					t.Errorf("call %d: err %v, want error %v", i, err, wantErr)
				}
			}
			if c.wantBase != "" && cl.Base() != c.wantBase {
				t.Errorf("in use %s, want %s", cl.Base(), c.wantBase)
			}
			if okHits.Load() != c.wantOK || badHits.Load() != c.wantBadly {
				t.Errorf("live replica answered %d, 502 replica %d; want %d, %d", okHits.Load(), badHits.Load(), c.wantOK, c.wantBadly)
			}
		})
	}
	if _, err := New("http://a:1,ftp://b", "t"); err == nil {
		t.Error("a list with a bad URL was accepted")
	}
}
