package cli_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cnperf/cnperf/internal/cli"
)

// TestTaskVerbsRefuseBadInput: the user verbs name what is wrong before
// anything is sent (the server URL here would refuse every connection).
func TestTaskVerbsRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const srv = "http://127.0.0.1:1"
	// A web server that is not cnperf, and one that accepts and never
	// answers.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><head><title>It works!</title></head><body>" + strings.Repeat("<p>x</p>", 500) + "</body></html>"))
	}))
	defer web.Close()
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	blackHole := "http://" + hole.Addr().String()
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no file", []string{"task", "create", "--server", srv, "--token", "t"}, nil, "no task file"},
		{"missing file", []string{"task", "create", "-f", filepath.Join(dir, "nope.json"), "--server", srv, "--token", "t"}, nil, "no such file"},
		{"malformed", []string{"task", "create", "-f", write("bad.json", `[{"task_type":"ping",`), "--server", srv, "--token", "t"}, nil, "malformed JSON"},
		{"unknown field", []string{"task", "create", "-f", write("field.json", `[{"task_typ":"ping"}]`), "--server", srv, "--token", "t"}, nil, "task_typ"},
		{"unknown type", []string{"task", "create", "-f", write("type.json", `[{"src_pod_uid":"a","dst_pod_uid":"b","task_type":"nmap"}]`), "--server", srv, "--token", "t"}, nil, `unknown task type "nmap"`},
		{"shell metacharacter", []string{"task", "create", "-f", write("meta.json", `[{"src_pod_uid":"a","dst_pod_uid":"b","task_type":"ping","task_param":"-c 1; reboot"}]`), "--server", srv, "--token", "t"}, nil, "shell metacharacter"},
		{"neither array nor object", []string{"task", "create", "-f", write("num.json", `42`), "--server", srv, "--token", "t"}, nil, "want a JSON array"},
		{"no server", []string{"clients"}, map[string]string{"CNPERF_SERVER": "", "CNPERF_TOKEN": "", "CNPERF_USER_TOKEN": ""}, "no server"},
		{"no token", []string{"task", "list", "--server", srv}, map[string]string{"CNPERF_TOKEN": "", "CNPERF_USER_TOKEN": ""}, "no token"},
		{"server unreachable", []string{"task", "get", "x", "--server", srv, "--token", "t"}, nil, "connection refused"},
		{"not a cnperf server", []string{"clients", "--server", web.URL, "--token", "t"}, nil, `not a cnperf server: it answered HTTP 200 (text/html, title "It works!")`},
		{"server never answers", []string{"clients", "--server", blackHole, "--token", "t", "--request-timeout", "0.5"}, nil, "no answer from " + blackHole + " within 500ms (--request-timeout)"},
		{"run: server never answers", []string{"run", "baseline", "--server", blackHole, "--token", "t", "--request-timeout", "500ms"}, nil, "within 500ms (--request-timeout)"},
		{"agent without identity", []string{"agent", "--server", srv, "--token", "t"}, map[string]string{"POD_UID": "", "POD_NAME": "", "POD_IP": "", "NODE_NAME": ""}, "set POD_UID or --pod-uid"},
		{"server without tokens", []string{"server", "--db", "sqlite:" + filepath.Join(dir, "x.db")}, map[string]string{"CNPERF_USER_TOKEN": "", "CNPERF_AGENT_TOKEN": ""}, "no user token"},
		{"server bad db", []string{"server", "--db", "oracle://x"}, map[string]string{"CNPERF_USER_TOKEN": "u", "CNPERF_AGENT_TOKEN": "a"}, "unknown DSN scheme"},
		{"server bad mysql db", []string{"server", "--db", "mysql://u@h/"}, map[string]string{"CNPERF_USER_TOKEN": "u", "CNPERF_AGENT_TOKEN": "a"}, "names no database"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var out, errb bytes.Buffer
			err := cli.Run(context.Background(), c.args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("cnperf %s: %v; want an error containing %q", strings.Join(c.args, " "), err, c.want)
			}
		})
	}
}
