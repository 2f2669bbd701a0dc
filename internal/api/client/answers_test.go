package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cnperf/cnperf/internal/api/client"
)

// TestNotACnperfServer: an endpoint that answers HTML (a web server, a
// login proxy) is named as such in one line, whatever its status, without
// its page; a cnperf-style text/plain 404 of an unknown route is not.
func TestNotACnperfServer(t *testing.T) {
	page := "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>\n<body>" + strings.Repeat("x", 5000) + "</body></html>"
	for _, c := range []struct {
		name        string
		status      int
		contentType string
		body        string
		notCnperf   bool
	}{
		{"html 200", 200, "text/html; charset=utf-8", page, true},
		{"html 404", 404, "text/html", page, true},
		{"html 302 target", 200, "text/html", "<html>login</html>", true},
		{"plain text 200", 200, "text/plain", "hello", true},
		{"json 200", 200, "application/json", `[]`, false},
		{"plain text 404 (unknown route)", 404, "text/plain; charset=utf-8", "404 page not found", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", c.contentType)
				w.WriteHeader(c.status)
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			cl, err := client.New(srv.URL, "tok")
			if err != nil {
				t.Fatal(err)
			}
			_, err = cl.ListRuns(context.Background(), 1, "")
			if got := errors.Is(err, client.ErrNotCnperf); got != c.notCnperf {
				t.Fatalf("errors.Is(ErrNotCnperf) = %v, want %v (err %v)", got, c.notCnperf, err)
			}
			if !c.notCnperf {
				return
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || len(msg) > 300 || strings.Contains(msg, "xxxx") {
				t.Errorf("want one short line without the page, got %q", msg)
			}
			if !strings.Contains(msg, srv.URL) {
				t.Errorf("the error does not name the URL %s: %q", srv.URL, msg)
			}
			if strings.Contains(c.body, "<title>") && !strings.Contains(msg, "Welcome to nginx!") {
				t.Errorf("the error does not give the page's title: %q", msg)
			}
		})
	}
}

// TestRequestTimeout: a server that accepts and never answers costs a
// call no more than the request timeout; a long poll gets its wait on top.
func TestRequestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // accept, read, never answer
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer conn.Close(); _, _ = conn.Read(make([]byte, 4096)); time.Sleep(10 * time.Second) }()
		}
	}()
	cl, err := client.New("http://"+ln.Addr().String(), "tok", client.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = cl.Clients(context.Background(), false)
	took := time.Since(start)
	if !errors.Is(err, client.ErrRequestTimeout) {
		t.Fatalf("err %v, want one wrapping ErrRequestTimeout", err)
	}
	if !strings.Contains(err.Error(), "--request-timeout") {
		t.Errorf("the error does not name the flag: %v", err)
	}
	if took > 5*time.Second {
		t.Errorf("the call took %v with a 300ms request timeout", took)
	}

	// A long poll that answers after its wait is not cut by the bound.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(600 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"tasks":[]}`))
	}))
	defer slow.Close()
	cl, err = client.New(slow.URL, "tok", client.WithRequestTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Fetch(context.Background(), "uid", time.Second); err != nil {
		t.Errorf("a long poll of 1s answered after 600ms failed: %v", err)
	}
}
