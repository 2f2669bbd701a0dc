package web

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLoginPageSaysWhereTheTokenIs: the login page names each place the
// server was told the token is kept, with the command that prints it,
// and no environment variable a Helm or kubectl user never set; a wrong
// token gets the same help.
func TestLoginPageSaysWhereTheTokenIs(t *testing.T) {
	places := []TokenPlace{{Install: "Kubernetes", Where: "Secret my-tokens (key user-token) in namespace perf",
		Command: "kubectl -n perf get secret my-tokens -o jsonpath='{.data.user-token}' | base64 -d"}}
	d, err := New(Options{API: noAPI{}, UserToken: "right", TokenPlaces: places})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	d.Register(mux)
	ts := httptest.NewServer(mux)
	defer ts.Close()
	for _, tc := range []struct {
		name string
		do   func() (*http.Response, error)
	}{
		{"page", func() (*http.Response, error) { return http.Get(ts.URL + "/login") }},
		{"wrong token", func() (*http.Response, error) {
			return http.Post(ts.URL+"/login", "application/x-www-form-urlencoded", strings.NewReader("token=wrong"))
		}},
	} {
		resp, err := tc.do()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page := html.UnescapeString(string(b))
		for _, want := range []string{"Secret my-tokens (key user-token) in namespace perf", places[0].Command} {
			if !strings.Contains(page, want) {
				t.Errorf("%s: the login page lacks %q", tc.name, want)
			}
		}
		if strings.Contains(page, "CNPERF_USER_TOKEN") {
			t.Errorf("%s: the login page names CNPERF_USER_TOKEN, which this install never set", tc.name)
		}
	}
}
