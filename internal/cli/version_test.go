package cli

import (
	"encoding/json"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestFromBuildInfo(t *testing.T) {
	cases := []struct {
		name string
		in   *debug.BuildInfo
		want buildInfo
	}{
		{"no build information", nil, buildInfo{Version: "dev", Commit: "unknown", GoVersion: runtime.Version()}},
		{"no VCS stamp", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			buildInfo{Version: "(devel)", Commit: "unknown", GoVersion: "go1.26.8"}},
		{"stamped, modified", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "true"}}},
			buildInfo{Version: "v1.2.3", Commit: "0123456789abcdef0123456789abcdef01234567", Modified: true, GoVersion: "go1.26.8"}},
		{"stamped, clean", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			buildInfo{Version: "v1.2.3", Commit: "abc", GoVersion: "go1.26.8"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := fromBuildInfo(tc.in); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if got, want := (buildInfo{Version: "v1", Commit: "abc", Modified: true, GoVersion: "go1.26.8"}).String(), "cnperf v1, commit abc (modified), go1.26.8"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

// TestWithVersion: a binary built from a tag (make build at a tagged
// commit, the release build) prints that tag, whatever go recorded.
func TestWithVersion(t *testing.T) {
	devel := buildInfo{Version: "(devel)", Commit: "abc", GoVersion: "go1.26.8"}
	if got := withVersion(devel, ""); got != devel {
		t.Errorf("no stamp: %+v, want %+v", got, devel)
	}
	if got := withVersion(devel, "v0.3.0"); got.Version != "v0.3.0" || got.Commit != "abc" {
		t.Errorf("stamped v0.3.0: %+v", got)
	}
	old := version
	t.Cleanup(func() { version = old })
	version = "v0.3.0"
	if got := readBuildInfo(); got.Version != "v0.3.0" {
		t.Errorf("readBuildInfo with version %q: %+v", version, got)
	}
	if img, err := defaultImage(); err != nil || !strings.HasSuffix(img, ":v0.3.0") {
		t.Errorf("defaultImage of v0.3.0: %q, %v", img, err)
	}
}

func TestWithFallback(t *testing.T) {
	stamped := buildInfo{Version: "v1", Commit: "abc", GoVersion: "go1.26.8"}
	unstamped := buildInfo{Version: "v1", Commit: "unknown", GoVersion: "go1.26.8"}
	cases := []struct {
		name     string
		in       buildInfo
		fallback string
		want     buildInfo
	}{
		{"stamp wins", stamped, "def", stamped},
		{"no fallback", unstamped, "", unstamped},
		{"clean fallback", unstamped, "def", buildInfo{Version: "v1", Commit: "def", GoVersion: "go1.26.8"}},
		{"modified fallback", unstamped, "def+modified", buildInfo{Version: "v1", Commit: "def", Modified: true, GoVersion: "go1.26.8"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := withFallback(tc.in, tc.fallback); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	want := readBuildInfo()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errs := cnperf(t, 10*time.Second, args...)
		if code != 0 || out != want.String()+"\n" {
			t.Errorf("cnperf %v: exit %d, out %q (stderr %q), want %q", args, code, out, errs, want.String()+"\n")
		}
	}
	code, out, errs := cnperf(t, 10*time.Second, "version", "--json")
	if code != 0 {
		t.Fatalf("cnperf version --json: exit %d: %s", code, errs)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	for _, k := range []string{"version", "commit", "modified", "go_version"} {
		if _, ok := got[k]; !ok {
			t.Errorf("version --json has no %q: %s", k, out)
		}
	}
	if got["go_version"] != runtime.Version() {
		t.Errorf("go_version %v, want %s", got["go_version"], runtime.Version())
	}
	if code, _, _ := cnperf(t, 10*time.Second, "version", "extra"); code == 0 {
		t.Errorf("cnperf version extra: exit 0, want a usage error")
	}
}
