package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

type noAPI struct{ API } // login never calls the API

// TestLoginRateLimitAndSecureCookie: a client that failed 5 logins in a
// minute is answered 429 (the token is not even compared) until the
// minute has passed; under TLS the session cookie is Secure.
func TestLoginRateLimitAndSecureCookie(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	d, err := New(Options{API: noAPI{}, UserToken: "right", Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	d.Register(mux)
	ts := httptest.NewTLSServer(mux)
	defer ts.Close()
	hc := ts.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	post := func(tok string) *http.Response {
		t.Helper()
		resp, err := hc.PostForm(ts.URL+"/login", url.Values{"token": {tok}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for i := range loginMaxFailures {
		if resp := post("wrong"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failed login %d: %d, want 401", i+1, resp.StatusCode)
		}
	}
	resp := post("right")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("login after %d failures: %d (Retry-After %q), want 429 with Retry-After", loginMaxFailures, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	mu.Lock()
	now = now.Add(loginWindow + time.Second)
	mu.Unlock()
	resp = post("right")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login a minute later: %d, want 303", resp.StatusCode)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			cookie = c
		}
	}
	if cookie == nil || !cookie.Secure || !cookie.HttpOnly {
		t.Fatalf("session cookie under TLS: %+v, want Secure and HttpOnly", cookie)
	}
}

// TestLoginLimitAllClients: failures spread over many addresses are
// bounded in all.
func TestLoginLimitAllClients(t *testing.T) {
	now := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	l := newLoginLimiter(func() time.Time { return now })
	for i := range loginMaxFailuresAll {
		addr := fmt.Sprintf("10.0.%d.%d", i/256, i%256)
		if ok, _ := l.allow(addr); !ok {
			t.Fatalf("attempt %d refused before the global limit", i)
		}
		l.failed(addr)
	}
	if ok, after := l.allow("192.0.2.1"); ok || after <= 0 {
		t.Errorf("a fresh address after %d failures in all: allowed=%v, retry after %s; want refused", loginMaxFailuresAll, ok, after)
	}
}
