package k8sauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cnperf/cnperf/internal/server"
)

// jwt makes a token-shaped string whose payload has the exp claim.
func jwt(sub string, exp time.Time) string {
	p := base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"sub":%q,"exp":%d}`, sub, exp.Unix()))
	return "eyJhbGciOiJSUzI1NiJ9." + p + ".sig"
}

func TestReview(t *testing.T) {
	now := time.Date(2026, 11, 23, 19, 0, 0, 0, time.UTC)
	agentUser := "system:serviceaccount:cnperf:cnperf-agent"
	bound := map[string]authv1.ExtraValue{ExtraPodName: {"cnperf-agent-x1"}, ExtraPodUID: {"uid-1"}}
	// The fake API server's answers, by token.
	answers := map[string]authv1.TokenReviewStatus{}
	reviews := 0
	kube := fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authv1.TokenReview)
		if len(tr.Spec.Audiences) != 1 || tr.Spec.Audiences[0] != "cnperf" {
			return true, nil, fmt.Errorf("review asked for audiences %v", tr.Spec.Audiences)
		}
		st, ok := answers[tr.Spec.Token]
		if !ok {
			return true, nil, errors.New("api server down")
		}
		return true, &authv1.TokenReview{Status: st}, nil
	})
	r, err := New(Options{Kube: kube, ServiceAccounts: []string{"cnperf/cnperf-agent"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	good := jwt("agent", now.Add(10*time.Minute))
	answers[good] = authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"cnperf"}, User: authv1.UserInfo{Username: agentUser, Extra: bound}}
	cases := []struct {
		name   string
		status authv1.TokenReviewStatus
		want   string // "" = accepted
	}{
		{"not authenticated", authv1.TokenReviewStatus{Error: "token has expired"}, "token has expired"},
		{"another service account", authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"cnperf"},
			User: authv1.UserInfo{Username: "system:serviceaccount:cnperf:intruder", Extra: bound}}, "not of an agent's service account"},
		{"another audience", authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"},
			User: authv1.UserInfo{Username: agentUser, Extra: bound}}, "not for audience"},
		{"not bound to a pod", authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"cnperf"},
			User: authv1.UserInfo{Username: agentUser}}, "not bound to a pod"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok := jwt(c.name, now.Add(time.Hour))
			answers[tok] = c.status
			_, err := r.Review(context.Background(), tok)
			if !errors.Is(err, server.ErrTokenRefused) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %v, want a refusal naming %q", err, c.want)
			}
		})
	}
	got, err := r.Review(context.Background(), good)
	if err != nil || got.PodUID != "uid-1" || got.PodName != "cnperf-agent-x1" || got.Username != agentUser {
		t.Fatalf("agent token: %+v, %v", got, err)
	}
	n := reviews
	if _, err := r.Review(context.Background(), good); err != nil || reviews != n {
		t.Errorf("second review of the same token: %v, %d reviews (want it cached)", err, reviews-n)
	}
	now = now.Add(CacheTTL + time.Second)
	if _, err := r.Review(context.Background(), good); err != nil || reviews != n+1 {
		t.Errorf("after the cache TTL: %v, %d new reviews, want 1", err, reviews-n)
	}
	if _, err := r.Review(context.Background(), "unknown"); err == nil || errors.Is(err, server.ErrTokenRefused) {
		t.Errorf("API server failure: %v, want an error that is not a refusal", err)
	}
	if _, err := New(Options{Kube: kube, ServiceAccounts: []string{"cnperf-agent"}}); err == nil {
		t.Error("service account without namespace accepted")
	}
}
