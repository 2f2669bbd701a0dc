package k8s

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// TestUserTokenSecret: the Secret of the user token is the one the
// server Deployment's CNPERF_USER_TOKEN refers to (Helm's
// auth.existingSecret), else cnperf-tokens; Tokens reads it there.
func TestUserTokenSecret(t *testing.T) {
	server := func(secret string) *appsv1.Deployment {
		env := []corev1.EnvVar{{Name: "CNPERF_DB", Value: "sqlite:/data/cnperf.db"}}
		if secret != "" {
			env = append(env, corev1.EnvVar{Name: "CNPERF_USER_TOKEN", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: UserTokenKey}}})
		}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: ServerName, Namespace: "perf"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "server", Env: env}}}}}}
	}
	tokens := func(name, tok string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "perf"}, Data: map[string][]byte{UserTokenKey: []byte(tok)}}
	}
	for _, tc := range []struct {
		name       string
		objs       []runtime.Object
		wantSecret string
		wantToken  string
	}{
		{"existing secret", []runtime.Object{server("perf-secret"), tokens("perf-secret", "t-existing"), tokens(TokensSecret, "t-default")}, "perf-secret", "t-existing"},
		{"chart's own", []runtime.Object{server(TokensSecret), tokens(TokensSecret, "t-default")}, TokensSecret, "t-default"},
		{"no deployment", []runtime.Object{tokens(TokensSecret, "t-default")}, TokensSecret, "t-default"},
		{"env without a secret", []runtime.Object{server(""), tokens(TokensSecret, "t-default")}, TokensSecret, "t-default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewForInterfaces(fake.NewSimpleClientset(tc.objs...), dynfake.NewSimpleDynamicClient(runtime.NewScheme()))
			c.Namespace = "perf"
			if got := c.UserTokenSecret(context.Background()); got != tc.wantSecret {
				t.Errorf("UserTokenSecret = %q, want %q", got, tc.wantSecret)
			}
			if tok, _, err := c.Tokens(context.Background()); err != nil || tok != tc.wantToken {
				t.Errorf("Tokens = %q, %v; want %q", tok, err, tc.wantToken)
			}
		})
	}
	if got, want := TokenCommand("perf", "perf-secret"), "kubectl -n perf get secret perf-secret -o jsonpath='{.data.user-token}' | base64 -d"; got != want {
		t.Errorf("TokenCommand = %q, want %q", got, want)
	}
}
