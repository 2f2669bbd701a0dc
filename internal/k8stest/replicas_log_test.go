package k8stest

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseAgentLog: a log answer is the kubelet's time-stamped lines;
// the kubelet's own error in a 200 answer (a log file it cannot open) is
// an error, not an empty log.
func TestParseAgentLog(t *testing.T) {
	since := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		body    string
		lines   int
		wantErr string
	}{
		{"lines since", "2026-11-26T21:59:59.5Z old line\n2026-11-26T22:00:01.25Z level=INFO msg=\"agent session open\"\n2026-11-26T22:00:02Z second\n", 2, ""},
		{"empty", "", 0, ""},
		{"kubelet error as body", `failed to try resolving symlinks in path "/var/log/pods/cnperf_cnperf-agent-x_1/agent/0.log": lstat /var/log/pods/cnperf_cnperf-agent-x_1: no such file or directory`, 0, "not the kubelet's time-stamped lines"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := parseAgentLog("cnperf-agent-x", []byte(tc.body), since)
			if tc.wantErr != "" {
				if l.err == nil || !strings.Contains(l.err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", l.err, tc.wantErr)
				}
				return
			}
			if l.err != nil || len(l.lines) != tc.lines || len(l.times) != tc.lines {
				t.Fatalf("%d lines, %d times, err %v; want %d", len(l.lines), len(l.times), l.err, tc.lines)
			}
			for _, tm := range l.times {
				if tm.Before(since) {
					t.Errorf("line at %v before %v kept", tm, since)
				}
			}
		})
	}
}

// TestSessionMovesVerdict: the check of the agents' session moves fails
// only on evidence, and says so when it has none.
func TestSessionMovesVerdict(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	kill := t0.Add(time.Minute)
	at := func(d time.Duration) time.Time { return kill.Add(d) }
	opened := agentLog{lines: []string{`msg="agent session open"`}, times: []time.Time{t0.Add(time.Second)}}
	movedIn := func(d time.Duration) agentLog {
		return agentLog{
			lines: []string{`msg="agent session open"`, `msg="agent session lost; reconnecting"`, `msg="agent session open"`},
			times: []time.Time{t0.Add(time.Second), at(10 * time.Millisecond), at(d)},
		}
	}
	notBack := agentLog{lines: []string{`msg="agent session open"`, `msg="no agent session; polling meanwhile"`}, times: []time.Time{t0.Add(time.Second), at(time.Second)}}
	unreadable := agentLog{err: errors.New(`the log of a is not the kubelet's time-stamped lines: "failed to try resolving symlinks"`)}
	for _, tc := range []struct {
		name        string
		logs        map[string]agentLog
		wantFailure string
		wantNote    string
	}{
		{"every log empty: no evidence, no failure", map[string]agentLog{"a": {}, "b": {}}, "", "NOT CHECKED"},
		{"every log unreadable: no evidence", map[string]agentLog{"a": unreadable, "b": unreadable}, "", "NOT CHECKED"},
		{"all read, none moved", map[string]agentLog{"a": opened, "b": opened}, "no agent lost its session", ""},
		{"moved in time", map[string]agentLog{"a": movedIn(2 * time.Second), "b": opened}, "", ""},
		{"moved late", map[string]agentLog{"a": movedIn(25 * time.Second), "b": opened}, "want all within 20s", ""},
		{"not back", map[string]agentLog{"a": notBack, "b": movedIn(time.Second)}, "not back: [a]", ""},
		{"some without evidence, none moved among the rest", map[string]agentLog{"a": opened, "b": {}}, "", "1 of 2 agents' logs are no evidence"},
		{"some without evidence, one late", map[string]agentLog{"a": movedIn(30 * time.Second), "b": unreadable}, "want all within 20s", "1 of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			failure, note := sessionMoves(tc.logs, kill).verdict(len(tc.logs), 20*time.Second)
			if (tc.wantFailure == "") != (failure == "") || !strings.Contains(failure, tc.wantFailure) {
				t.Errorf("failure %q, want %q", failure, tc.wantFailure)
			}
			if (tc.wantNote == "") != (note == "") || !strings.Contains(note, tc.wantNote) {
				t.Errorf("note %q, want %q", note, tc.wantNote)
			}
		})
	}
}
