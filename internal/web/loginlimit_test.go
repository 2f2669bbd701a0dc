package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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

// TestLoginLimitStrangersCannotLockOut: failures from many addresses
// (far more than any global limit would allow) refuse only the addresses
// that failed; the right token logs in from any other address, and from
// an address whose failures are under the limit. The table of addresses
// stays bounded. An IPv6 client is limited by its /64.
func TestLoginLimitStrangersCannotLockOut(t *testing.T) {
	now := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	d, err := New(Options{API: noAPI{}, UserToken: "right", Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	d.Register(mux)
	login := func(addr, tok string) int {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec.Code
	}
	// 3,000 strangers fail 5 times each (15,000 failures in a minute).
	const strangers = 3000
	for i := range strangers {
		addr := fmt.Sprintf("10.%d.%d.1:4000", i/256, i%256)
		for range loginMaxFailures {
			if got := login(addr, "wrong"); got != http.StatusUnauthorized {
				t.Fatalf("stranger %d's failure: %d, want 401", i, got)
			}
		}
	}
	if got := login("10.0.0.1:4001", "right"); got != http.StatusTooManyRequests {
		t.Errorf("right token from an address that failed %d times: %d, want 429", loginMaxFailures, got)
	}
	if got := login("192.0.2.7:5000", "right"); got != http.StatusSeeOther {
		t.Errorf("right token from an address that never failed, after %d strangers' failures: %d, want 303", strangers*loginMaxFailures, got)
	}
	for range loginMaxFailures - 1 {
		login("192.0.2.8:5000", "wrong")
	}
	if got := login("192.0.2.8:5001", "right"); got != http.StatusSeeOther {
		t.Errorf("right token from an address under its limit: %d, want 303", got)
	}
	// IPv6: one /64 is one source, whatever its interface ids.
	for i := range loginMaxFailures {
		login(fmt.Sprintf("[2001:db8:1:2::%x]:4000", i+1), "wrong")
	}
	if got := login("[2001:db8:1:2::ffff]:4000", "right"); got != http.StatusTooManyRequests {
		t.Errorf("right token from a /64 that failed %d times: %d, want 429", loginMaxFailures, got)
	}
	if got := login("[2001:db8:1:3::1]:4000", "right"); got != http.StatusSeeOther {
		t.Errorf("right token from another /64: %d, want 303", got)
	}
}

// TestLoginLimitBoundedTable: the table of failing addresses never
// holds more than loginMaxClients, and a full table of fresh addresses
// makes room by dropping the oldest.
func TestLoginLimitBoundedTable(t *testing.T) {
	now := time.Date(2026, 11, 23, 16, 0, 0, 0, time.UTC)
	l := newLoginLimiter(func() time.Time { return now })
	for i := range 3 * loginMaxClients {
		now = now.Add(time.Microsecond)
		l.failed(fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255))
		if n := len(l.by); n > loginMaxClients {
			t.Fatalf("after %d addresses the table holds %d, want at most %d", i+1, n, loginMaxClients)
		}
	}
	if _, ok := l.by["10.0.0.0"]; ok {
		t.Errorf("the oldest address is still in a full table")
	}
	last := fmt.Sprintf("10.%d.%d.%d", (3*loginMaxClients-1)>>16, ((3*loginMaxClients-1)>>8)&255, (3*loginMaxClients-1)&255)
	if _, ok := l.by[last]; !ok {
		t.Errorf("the newest address %s is not in the table", last)
	}
}
