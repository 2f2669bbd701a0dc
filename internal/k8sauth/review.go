// Package k8sauth authenticates cnperf agents on Kubernetes: an agent
// presents a projected ServiceAccount token (audience "cnperf", short
// expiry, rotated by the kubelet), and the server asks the API server
// whether it is valid with a TokenReview. The pod's name and UID come from
// the token's bound claims, which the review returns in the user's extra
// fields (authentication.kubernetes.io/pod-name, .../pod-uid), never from
// what the agent says about itself. Only tokens of the agents'
// ServiceAccount(s) are accepted.
//
// Reviews are cached by the token's SHA-256 for at most CacheTTL (and
// never past the token's own expiry), so a heartbeat a second does not
// cost a review a second.
package k8sauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cnperf/cnperf/internal/server"
)

// Defaults.
const (
	// Audience is the audience agents' tokens are issued for.
	Audience = "cnperf"
	// CacheTTL bounds how long a reviewed token is trusted without a new
	// review.
	CacheTTL = time.Minute
	// Bound-claim keys in the TokenReview's user extra.
	ExtraPodName = "authentication.kubernetes.io/pod-name"
	ExtraPodUID  = "authentication.kubernetes.io/pod-uid"
	// maxCached bounds the cache (agents held by a server are bounded too).
	maxCached = 50000
)

// Options configure a Reviewer.
type Options struct {
	Kube kubernetes.Interface
	// Audience the token must be issued for (Audience when "").
	Audience string
	// ServiceAccounts are the accepted accounts as NAMESPACE/NAME.
	ServiceAccounts []string
	Timeout         time.Duration // per review (5 s when 0)
	Now             func() time.Time
}

// Reviewer implements server.AgentReviewer with TokenReview.
type Reviewer struct {
	opts  Options
	users []string // system:serviceaccount:NS:NAME

	mu    sync.Mutex // guards cache
	cache map[[32]byte]cached
}

type cached struct {
	agent   server.ReviewedAgent
	expires time.Time
}

// New checks opts and returns a Reviewer.
func New(opts Options) (*Reviewer, error) {
	if opts.Kube == nil {
		return nil, errors.New("token review: no Kubernetes client")
	}
	if opts.Audience == "" {
		opts.Audience = Audience
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(opts.ServiceAccounts) == 0 {
		return nil, errors.New("token review: no agent service account (NAMESPACE/NAME)")
	}
	r := &Reviewer{opts: opts, cache: map[[32]byte]cached{}}
	for _, sa := range opts.ServiceAccounts {
		ns, name, ok := strings.Cut(sa, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("token review: service account %q: want NAMESPACE/NAME", sa)
		}
		r.users = append(r.users, "system:serviceaccount:"+ns+":"+name)
	}
	return r, nil
}

// Review asks the API server about tok and returns the pod it is bound
// to. A token that is invalid, of another audience, of another service
// account or not bound to a pod is server.ErrTokenRefused.
func (r *Reviewer) Review(ctx context.Context, tok string) (server.ReviewedAgent, error) {
	key := sha256.Sum256([]byte(tok))
	now := r.opts.Now()
	r.mu.Lock()
	c, ok := r.cache[key]
	r.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.agent, nil
	}
	rctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	tr, err := r.opts.Kube.AuthenticationV1().TokenReviews().Create(rctx, &authv1.TokenReview{
		Spec: authv1.TokenReviewSpec{Token: tok, Audiences: []string{r.opts.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return server.ReviewedAgent{}, fmt.Errorf("token review: %w", err)
	}
	a, err := r.check(tr.Status)
	if err != nil {
		return server.ReviewedAgent{}, err
	}
	expires := now.Add(CacheTTL)
	if exp, ok := expiry(tok); ok && exp.Before(expires) {
		expires = exp
	}
	r.mu.Lock()
	if len(r.cache) >= maxCached {
		r.cache = map[[32]byte]cached{}
	}
	r.cache[key] = cached{agent: a, expires: expires}
	r.mu.Unlock()
	return a, nil
}

// check reads the review's answer.
func (r *Reviewer) check(st authv1.TokenReviewStatus) (server.ReviewedAgent, error) {
	if !st.Authenticated {
		msg := st.Error
		if msg == "" {
			msg = "not authenticated"
		}
		return server.ReviewedAgent{}, fmt.Errorf("%w: token review: %s", server.ErrTokenRefused, msg)
	}
	if !slices.Contains(st.Audiences, r.opts.Audience) {
		return server.ReviewedAgent{}, fmt.Errorf("%w: token is not for audience %q (it is for %v)", server.ErrTokenRefused, r.opts.Audience, st.Audiences)
	}
	if !slices.Contains(r.users, st.User.Username) {
		return server.ReviewedAgent{}, fmt.Errorf("%w: token of %s, not of an agent's service account (%s)", server.ErrTokenRefused, st.User.Username, strings.Join(r.opts.ServiceAccounts, ", "))
	}
	one := func(key string) string {
		if v := st.User.Extra[key]; len(v) == 1 {
			return v[0]
		}
		return ""
	}
	a := server.ReviewedAgent{PodUID: one(ExtraPodUID), PodName: one(ExtraPodName), Username: st.User.Username}
	if a.PodUID == "" || a.PodName == "" {
		return server.ReviewedAgent{}, fmt.Errorf("%w: token of %s is not bound to a pod (use a projected serviceAccountToken volume)", server.ErrTokenRefused, st.User.Username)
	}
	return a, nil
}

// expiry reads the exp claim of a JWT the API server has just validated
// (so its payload is trusted), to cache no longer than the token lives.
func expiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(b, &claims) != nil || claims.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(claims.Exp, 0), true
}
