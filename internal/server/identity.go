package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/store"
)

// Agent identity. Every agent call is authenticated as one of:
//   - an agent's own credential (outside Kubernetes): issued once by POST
//     /api/v2/agent/join to a caller holding the join token, bound to a pod
//     uid, stored as its SHA-256 only;
//   - a Kubernetes ServiceAccount token (AgentReviewer): the pod uid comes
//     from the token's bound claims, checked by a TokenReview;
//   - the join token itself, which joins, and may act only for a pod uid
//     that holds no credential (the seed's v1 agents never join), unless
//     Options.RequireAgentCredentials.
//
// A pod uid is bound to the first evidence shown for it. Outside
// Kubernetes that is the first join (first come); a revoked credential
// keeps its uid taken, so the join token cannot bring a revoked agent
// back: an admin forgets the uid (`cnperf agents forget UID`) to let it
// join afresh. A TokenReview'd ServiceAccount token is stronger evidence
// than the join token: when a reviewed pod finds a join-token credential
// on its uid (a squatter that joined first), that credential is revoked,
// and the join token can neither join nor act for a uid a review vouched
// for.
//
// Then each endpoint checks that the caller is the agent the heartbeat,
// fetch, task or report belongs to (actFor, ownTask): 403 otherwise.

// AgentReviewer verifies a bearer token that is neither the join token nor
// an agent credential (on Kubernetes: a projected ServiceAccount token, by
// TokenReview) and says which pod presented it.
type AgentReviewer interface {
	Review(ctx context.Context, token string) (ReviewedAgent, error)
}

// ReviewedAgent is the pod a reviewed token was bound to.
type ReviewedAgent struct {
	PodUID, PodName, Username string
}

// ErrTokenRefused is what an AgentReviewer returns (wrapped) for a token
// that is not valid for an agent: 401. Any other error is the reviewer's
// own failure: 503.
var ErrTokenRefused = errors.New("token refused")

// Ways a caller was authenticated (caller.via).
const (
	viaJoinToken      = "join token"
	viaCredential     = "agent credential"
	viaServiceAccount = "service account token"
)

// caller is the authenticated agent of a request.
type caller struct {
	uid     string // the agent's pod uid; "" for the join token
	podName string // the pod's name, when the token says it (ServiceAccount tokens)
	via     string
}

type callerKey struct{}

func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// credCacheTTL bounds how long a credential found in the store is trusted
// from memory: a revocation on another replica takes effect within it (on
// this one at once).
const credCacheTTL = 10 * time.Second

// credCache maps credential hashes to pod uids, so that heartbeats do not
// read the store.
type credCache struct {
	mu sync.Mutex // guards m
	m  map[string]credEntry
}

type credEntry struct {
	uid     string
	expires time.Time
}

func (c *credCache) get(hash string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[hash]
	if !ok || now.After(e.expires) {
		return "", false
	}
	return e.uid, true
}

func (c *credCache) put(hash, uid string, now time.Time, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= limit {
		c.m = map[string]credEntry{} // bounded: start over rather than grow
	}
	c.m[hash] = credEntry{uid: uid, expires: now.Add(credCacheTTL)}
}

func (c *credCache) drop(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, e := range c.m {
		if e.uid == uid {
			delete(c.m, h)
		}
	}
}

// hashCredential is how credentials are stored: a credential is 256
// random bits, so a fast hash suffices (there is no dictionary to try);
// a leaked table gives no usable credential.
func hashCredential(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

func unauthorized(format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusUnauthorized, Message: fmt.Sprintf(format, args...)}
}

func forbidden(field, format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusForbidden, Field: field, Message: fmt.Sprintf(format, args...)}
}

// authAgent authenticates an agent call and passes the caller on in the
// request's context.
func (s *Server) authAgent(v1 bool, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		tok, ok := bearer(req)
		if !ok {
			s.fail(w, req, v1, unauthorized("missing bearer token (Authorization: Bearer TOKEN)"))
			return
		}
		c, err := s.identify(req.Context(), tok)
		if err != nil {
			s.fail(w, req, v1, err)
			return
		}
		h(w, req.WithContext(context.WithValue(req.Context(), callerKey{}, c)))
	}
}

// identify tells which agent a bearer token belongs to.
func (s *Server) identify(ctx context.Context, tok string) (caller, error) {
	if s.opts.AgentToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.AgentToken)) == 1 {
		return caller{via: viaJoinToken}, nil
	}
	if strings.HasPrefix(tok, api.CredentialPrefix) {
		hash := hashCredential(tok)
		now := s.now()
		if uid, ok := s.creds.get(hash, now); ok {
			return caller{uid: uid, via: viaCredential}, nil
		}
		c, err := s.st.CredentialByHash(ctx, hash)
		if errors.Is(err, store.ErrNotFound) {
			return caller{}, unauthorized("unknown or revoked agent credential (remove the agent's --state-dir token file to join again)")
		}
		if err != nil {
			return caller{}, fmt.Errorf("look up agent credential: %w", err)
		}
		s.creds.put(hash, c.PodUID, now, 2*s.opts.Limits.MaxAgents)
		return caller{uid: c.PodUID, via: viaCredential}, nil
	}
	if s.opts.AgentReviewer != nil && strings.Count(tok, ".") == 2 { // only JWTs are worth a review
		ra, err := s.opts.AgentReviewer.Review(ctx, tok)
		if errors.Is(err, ErrTokenRefused) {
			s.log.Warn("agent token refused", "err", err)
			return caller{}, unauthorized("%v", err)
		}
		if err != nil {
			s.log.Error("token review failed", "err", err)
			return caller{}, &api.Error{Status: http.StatusServiceUnavailable, Message: "token review failed (see the server log)"}
		}
		if err := s.claimReviewed(ctx, ra.PodUID); err != nil {
			return caller{}, err
		}
		return caller{uid: ra.PodUID, podName: ra.PodName, via: viaServiceAccount}, nil
	}
	return caller{}, unauthorized("wrong token for this endpoint")
}

// actFor checks that the request's caller may act for the agent uid.
func (s *Server) actFor(r *http.Request, uid string) error {
	if uid == "" {
		return api.BadRequest("pod_uid", "missing")
	}
	c := callerOf(r)
	if c.uid != "" {
		if c.uid != uid {
			return forbidden("pod_uid", "this %s belongs to agent %q: it cannot act for %q", c.via, c.uid, uid)
		}
		return nil
	}
	if c.via != viaJoinToken {
		return unauthorized("no agent identity") // not reached: every agent route authenticates
	}
	if s.opts.RequireAgentCredentials {
		return forbidden("pod_uid", "the join token only joins (POST /api/v2/agent/join): this server requires each agent's own credential (--require-agent-credentials)")
	}
	if s.reviewed.has(uid) {
		return forbidden("pod_uid", "agent %q authenticates by its ServiceAccount token: the join token cannot speak for it", uid)
	}
	cred, err := s.st.GetCredential(r.Context(), uid)
	switch {
	case err == nil && cred.RevokedAt != nil:
		return forbidden("pod_uid", "agent %q was revoked: the join token cannot speak for it (`cnperf agents forget %s` lets it join again)", uid, uid)
	case err == nil:
		return forbidden("pod_uid", "agent %q has joined: only its own credential speaks for it, not the join token", uid)
	case errors.Is(err, store.ErrNotFound):
		return nil // an agent that never joined (a seed v1 client)
	default:
		return fmt.Errorf("look up credential of %s: %w", uid, err)
	}
}

// ownTask checks that the task is uid's: its source (dst false) or its
// destination (dst true). An unknown task passes, for the handler to
// answer 404.
func (s *Server) ownTask(ctx context.Context, taskID, uid string, dst bool) error {
	t, err := s.st.GetTask(ctx, taskID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up task %s: %w", taskID, err)
	}
	owner, side := t.SrcPodUID, "source"
	if dst {
		owner, side = t.DstPodUID, "destination"
	}
	if owner != uid {
		return forbidden("task_id", "task %s belongs to agent %q (its %s), not %q", taskID, owner, side, uid)
	}
	return nil
}

// actForTask is actFor and ownTask together.
func (s *Server) actForTask(r *http.Request, taskID, uid string, dst bool) error {
	if err := s.actFor(r, uid); err != nil {
		return err
	}
	return s.ownTask(r.Context(), taskID, uid, dst)
}

// newCredential makes an agent credential: the prefix and 256 random bits.
func newCredential() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("make credential: %w", err)
	}
	return api.CredentialPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// handleJoin gives an agent that holds the join token its own credential,
// once per pod uid.
func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	join := func(ctx context.Context, req api.JoinRequest) (api.JoinReply, error) {
		if c := callerOf(r); c.via != viaJoinToken {
			return api.JoinReply{}, forbidden("", "only the join token joins; this caller already authenticates with its %s", c.via)
		}
		if req.PodUID == "" {
			return api.JoinReply{}, api.BadRequest("pod_uid", "missing")
		}
		if err := checkLen("pod_uid", req.PodUID, MaxUIDLen); err != nil {
			return api.JoinReply{}, err
		}
		if s.reviewed.has(req.PodUID) {
			return api.JoinReply{}, forbidden("pod_uid", "agent %q authenticates by its ServiceAccount token (TokenReview): the join token cannot claim its uid", req.PodUID)
		}
		tok, err := newCredential()
		if err != nil {
			return api.JoinReply{}, err
		}
		_, err = s.st.CreateCredential(ctx, store.Credential{PodUID: req.PodUID, Hash: hashCredential(tok)}, s.now())
		if errors.Is(err, store.ErrConflict) {
			if c, gerr := s.st.GetCredential(ctx, req.PodUID); gerr == nil && c.RevokedAt != nil {
				s.log.Warn("join of a revoked agent refused", "pod_uid", req.PodUID)
				return api.JoinReply{}, forbidden("pod_uid", "agent %q was revoked at %s: the join token cannot bring it back; an admin lets it join again with `cnperf agents forget %s`",
					req.PodUID, c.RevokedAt.Format(time.RFC3339), req.PodUID)
			}
			s.log.Warn("join of a uid that has joined refused", "pod_uid", req.PodUID)
			return api.JoinReply{}, forbidden("pod_uid", "agent %q has joined already (first come): only its own credential speaks for it; if that was not this agent, an admin runs `cnperf agents revoke %s` and `cnperf agents forget %s`, then this agent joins", req.PodUID, req.PodUID, req.PodUID)
		}
		if err != nil {
			return api.JoinReply{}, err
		}
		s.log.Info("agent joined", "pod_uid", req.PodUID)
		return api.JoinReply{PodUID: req.PodUID, Token: tok}, nil
	}
	jsonCall(s, false, api.MaxBody, nil, join)(w, r)
}

// handleRevoke ends an agent's credential (user token).
func (s *Server) handleRevoke(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	if err := checkLen("uid", uid, MaxUIDLen); err != nil {
		s.fail(w, r, false, err)
		return
	}
	c, err := s.revoke(r.Context(), uid)
	if err != nil {
		s.fail(w, r, false, err)
		return
	}
	s.log.Info("agent credential revoked", "pod_uid", uid)
	writeJSON(w, http.StatusOK, api.Revoked{PodUID: c.PodUID, CreatedAt: c.CreatedAt})
}

// revoke marks uid's credential revoked and ends what it authenticated.
func (s *Server) revoke(ctx context.Context, uid string) (store.Credential, error) {
	c, err := s.st.RevokeCredential(ctx, uid, s.now())
	if err != nil {
		return store.Credential{}, err
	}
	s.creds.drop(uid)
	s.sessions.end(uid, &sessionEnded{status: http.StatusUnauthorized, msg: "the agent's credential was revoked"})
	return c, nil
}

// handleForget deletes an agent's credential, revoked or not (user
// token): the uid may join again with the join token.
func (s *Server) handleForget(w http.ResponseWriter, r *http.Request) {
	uid := r.PathValue("uid")
	if err := checkLen("uid", uid, MaxUIDLen); err != nil {
		s.fail(w, r, false, err)
		return
	}
	if err := s.st.ForgetCredential(r.Context(), uid); err != nil {
		s.fail(w, r, false, err)
		return
	}
	s.creds.drop(uid)
	s.sessions.end(uid, &sessionEnded{status: http.StatusUnauthorized, msg: "the agent's credential was forgotten"})
	s.log.Info("agent credential forgotten: the uid may join again", "pod_uid", uid)
	writeJSON(w, http.StatusOK, api.Revoked{PodUID: uid})
}

// reviewedUIDs remembers the pod uids a TokenReview vouched for (bounded:
// it starts over rather than grow), so that each is checked for a
// squatter's credential once per process, not on every heartbeat.
type reviewedUIDs struct {
	mu sync.Mutex // guards m
	m  map[string]struct{}
}

func (r *reviewedUIDs) has(uid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.m[uid]
	return ok
}

func (r *reviewedUIDs) add(uid string, limit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= limit {
		r.m = map[string]struct{}{}
	}
	r.m[uid] = struct{}{}
}

// claimReviewed binds uid to the reviewed pod: a live join-token
// credential on it (a squatter that joined before the pod) is revoked.
func (s *Server) claimReviewed(ctx context.Context, uid string) error {
	if s.reviewed.has(uid) {
		return nil
	}
	c, err := s.st.GetCredential(ctx, uid)
	switch {
	case err == nil && c.RevokedAt == nil:
		if _, err := s.revoke(ctx, uid); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("revoke the join-token credential on reviewed pod %s: %w", uid, err)
		}
		s.log.Warn("a join-token credential held the uid of a reviewed pod: revoked", "pod_uid", uid, "issued", c.CreatedAt)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("look up credential of %s: %w", uid, err)
	}
	s.reviewed.add(uid, 2*s.opts.Limits.MaxAgents)
	return nil
}
