package k8stest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestRegistryRefusesAnonymous: the harness's registry answers 401 with a
// Basic challenge without its credentials, and a client with the Docker
// config WriteDockerConfig writes pushes and pulls (what the real-cluster
// check relies on to show the pull Secret was used). No root needed.
func TestRegistryRefusesAnonymous(t *testing.T) {
	r := &Registry{User: "u", Password: "p"}
	srv := httptest.NewServer(r.auth(registry.New(registry.Logger(log.New(io.Discard, "", 0)))))
	defer srv.Close()
	r.Host = strings.TrimPrefix(srv.URL, "http://")

	resp, err := http.Get(srv.URL + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
		t.Fatalf("anonymous /v2/: HTTP %d, challenge %q; want 401 Basic", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	ref, err := name.ParseReference(r.Host + "/cnperf:t")
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err == nil {
		t.Fatal("an anonymous push was accepted")
	}
	dir := t.TempDir()
	if err := r.WriteDockerConfig(dir); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
	if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		t.Fatalf("push with the Docker config's credentials: %v", err)
	}
	d, _ := img.Digest()
	if _, err := remote.Image(ref.Context().Digest(d.String()), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		t.Fatalf("pull with the credentials: %v", err)
	}
	if got := fetchedBy(r.Fetches(), "/manifests/"+d.String()); !got["127.0.0.1"] {
		t.Errorf("fetches %v: no manifest fetch by digest from 127.0.0.1", r.Fetches())
	}
	if len(r.Refused()) == 0 {
		t.Error("no refused request recorded")
	}
}
