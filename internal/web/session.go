package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

const cookieName = "cnperf_session"

// maxSessions bounds the session table; the oldest logins go first.
const maxSessions = 10000

type session struct {
	id, csrf string
	expires  time.Time
}

// sessions is the in-memory table of logins. A server restart logs
// everyone out, which costs a login and keeps no secret on disk.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu   sync.Mutex // guards byID
	byID map[string]session
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, now: now, byID: map[string]session{}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b)
}

func (s *sessions) create() session {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for id, x := range s.byID {
		if now.After(x.expires) {
			delete(s.byID, id)
		}
	}
	for len(s.byID) >= maxSessions {
		var oldest string
		var at time.Time
		for id, x := range s.byID {
			if oldest == "" || x.expires.Before(at) {
				oldest, at = id, x.expires
			}
		}
		delete(s.byID, oldest)
	}
	x := session{id: randomHex(32), csrf: randomHex(16), expires: now.Add(s.ttl)}
	s.byID[x.id] = x
	return x
}

func (s *sessions) get(id string) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.byID[id]
	if !ok || s.now().After(x.expires) {
		delete(s.byID, id)
		return session{}, false
	}
	return x, true
}

func (s *sessions) delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byID, id)
}

func (d *Dashboard) session(r *http.Request) (session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return session{}, false
	}
	return d.sess.get(c.Value)
}

// authed lets a request in with a session cookie or the bearer token;
// otherwise a GET is sent to the login page and anything else gets 401.
// Form posts with a session must carry the session's CSRF token.
func (d *Dashboard) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if d.bearerOK(r) {
			h(w, r)
			return
		}
		s, ok := d.session(r)
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			d.fail(w, r, http.StatusUnauthorized, "not logged in: log in with your token first")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if err := r.ParseForm(); err != nil {
				d.fail(w, r, http.StatusBadRequest, "unreadable form: "+err.Error())
				return
			}
			if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
				d.fail(w, r, http.StatusForbidden, "the form is stale or came from elsewhere (CSRF token mismatch): reload the page and try again")
				return
			}
		}
		h(w, r)
	}
}

// safeNext keeps a post-login redirect on this site.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || len(next) > 2000 {
		return "/"
	}
	return next
}

type loginPage struct {
	page
	Next   string
	Places []TokenPlace
}

func (d *Dashboard) handleLoginPage(w http.ResponseWriter, r *http.Request) {
	d.render(w, r, http.StatusOK, "login", loginPage{page: page{Title: "Log in"}, Next: safeNext(r.URL.Query().Get("next")), Places: d.opts.TokenPlaces})
}

func (d *Dashboard) handleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		d.fail(w, r, http.StatusBadRequest, "unreadable login form: "+err.Error())
		return
	}
	next := safeNext(r.PostFormValue("next"))
	addr := clientAddr(r)
	if ok, after := d.login.allow(addr); !ok {
		secs := int(after.Seconds()) + 1
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		p := loginPage{page: page{Title: "Log in", Flash: fmt.Sprintf("Too many failed logins: try again in %d s.", secs), FlashKind: "error"}, Next: next, Places: d.opts.TokenPlaces}
		d.render(w, r, http.StatusTooManyRequests, "login", p)
		return
	}
	tok := r.PostFormValue("token")
	if subtle.ConstantTimeCompare([]byte(tok), []byte(d.opts.UserToken)) != 1 {
		d.login.failed(addr)
		p := loginPage{page: page{Title: "Log in", Flash: "Wrong token: use the user token the server was started with.", FlashKind: "error"}, Next: next, Places: d.opts.TokenPlaces}
		d.render(w, r, http.StatusUnauthorized, "login", p)
		return
	}
	d.login.succeeded(addr)
	s := d.sess.create()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, Expires: s.expires})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (d *Dashboard) handleLogout(w http.ResponseWriter, r *http.Request) {
	if s, ok := d.session(r); ok {
		d.sess.delete(s.id)
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
