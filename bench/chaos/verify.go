package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// result is one result an agent produced: a "task finished" line, logged
// once its outbox held the report.
type result struct {
	agent                     int
	taskID, state, reason, id string
}

// ledger is what the agents' own logs and state dirs say.
type ledger struct {
	started      map[string][]int // task id → the agents that executed it
	results      []result
	notStarted   int // tasks whose start the server refused
	deliveryFail int // delivery attempts that failed and were retried (logged ones)
	deadLogged   int // "kept as a dead letter" lines
	deadFiles    []string
	leftInOutbox []string
	sessions     int // sessions opened
	lines        int
}

// readLedger reads every agent's log and state dir.
func (b *bench) readLedger() (*ledger, error) {
	l := &ledger{started: map[string][]int{}}
	for _, a := range b.agents {
		f, err := os.Open(a.log)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e struct {
				Msg      string `json:"msg"`
				TaskID   string `json:"task_id"`
				State    string `json:"state"`
				Reason   string `json:"reason"`
				ReportID string `json:"report_id"`
			}
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue // not a log record (a panic's trace, say)
			}
			l.lines++
			switch e.Msg {
			case "task started":
				l.started[e.TaskID] = append(l.started[e.TaskID], a.i)
			case "task finished":
				l.results = append(l.results, result{agent: a.i, taskID: e.TaskID, state: e.State, reason: e.Reason, id: e.ReportID})
			case "task not started":
				l.notStarted++
			case "result delivery failed; retrying":
				l.deliveryFail++
			case "result refused by the server; kept as a dead letter":
				l.deadLogged++
			case "agent session open":
				l.sessions++
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %w", a.log, err)
		}
		l.deadFiles = append(l.deadFiles, deadLetters(a.state)...)
		l.leftInOutbox = append(l.leftInOutbox, outboxFiles(a.state)...)
	}
	return l, nil
}

// verify compares the store with the ledger, prints the figures and
// returns whether every task ended, no result was lost and none ran
// twice.
func (b *bench) verify(tasks []api.TaskV2, l *ledger, waitErr error) bool {
	byID := map[string]api.TaskV2{}
	states := map[string]int{}
	late := 0
	reasons := map[string]int{}
	for _, t := range tasks {
		byID[t.TaskID] = t
		states[t.State]++
		if t.LateReason != "" {
			late++
		}
		if t.State != api.StateSucceeded && t.Reason != "" {
			reasons[shortReason(t.Reason)]++
		}
	}
	open := 0
	for s, n := range states {
		if !api.TerminalState(s) {
			open += n
		}
	}

	// Results produced vs stored: the stored task carries the agent's
	// state and reason (a late one too, with late_reason).
	var lost []string
	producedBy := map[string]int{}
	for _, r := range l.results {
		producedBy[r.taskID]++
		t, ok := byID[r.taskID]
		switch {
		case !ok:
			lost = append(lost, fmt.Sprintf("%s (agent %d, %s): no such task in the store", r.taskID, r.agent, r.state))
		case t.State != r.state || t.Reason != r.reason:
			lost = append(lost, fmt.Sprintf("%s (agent %d): produced %s %q, stored %s %q late_reason %q",
				r.taskID, r.agent, r.state, r.reason, t.State, t.Reason, t.LateReason))
		}
	}
	var twice []string
	for id, ags := range l.started {
		if len(ags) > 1 {
			twice = append(twice, fmt.Sprintf("%s executed %d times (agents %v)", id, len(ags), ags))
		}
	}
	for id, n := range producedBy {
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s: %d results produced", id, n))
		}
	}
	noResult := 0 // executions whose agent was killed before a result
	for id := range l.started {
		if producedBy[id] == 0 {
			noResult++
		}
	}

	b.mu.Lock()
	f := b.fig
	b.mu.Unlock()
	cannotWrite := countLines(filepath.Join(b.dir, "server.log"), `"msg":"store cannot write"`)

	fmt.Printf("\nchaos run: %d agents, seed %d, %v from start to the end of the chaos, %v in all\n",
		b.c.agents, b.c.seed, f.chaosEnded.Sub(f.started).Round(time.Second), time.Since(f.started).Round(time.Second))
	row := func(k string, v any) { fmt.Printf("  %-52s %v\n", k, v) }
	fmt.Println("tasks")
	row("runs / tasks created (answered 201)", fmt.Sprintf("%d / %d", f.runsCreated, f.tasksCreated))
	row("tasks in the store", len(tasks))
	for _, s := range sortedKeys(states) {
		row("  "+s, states[s])
	}
	row("  of them late (result after an absence; late_reason)", late)
	row("not ended", open)
	for i, r := range sortedByCount(reasons) {
		if i == 6 {
			break
		}
		row(fmt.Sprintf("  reason %q", r), reasons[r])
	}
	fmt.Println("results (agents' ledger vs the store)")
	row("executions (\"task started\")", countStarts(l))
	row("results produced (\"task finished\", in the outbox)", len(l.results))
	row("results stored as produced", len(l.results)-len(lost))
	row("results lost", len(lost))
	row("executions without a result (agent killed mid-task)", noResult)
	row("tasks executed twice", len(twice))
	row("starts refused by the server (not run)", l.notStarted)
	row("dead letters (files / logged)", fmt.Sprintf("%d / %d", len(l.deadFiles), l.deadLogged))
	row("reports left undelivered in outboxes", len(l.leftInOutbox))
	row("agent delivery attempts failed, retried (logged)", l.deliveryFail)
	row("agent sessions opened", l.sessions)
	fmt.Println("chaos")
	for _, k := range []string{evAgentKill, evPartition, evServerKill, evDiskFull} {
		row(k, f.events[k])
	}
	row("events skipped (nothing free to act on)", f.skipped)
	row("agent down (kill → restart)", spread(f.agentDown))
	row("partition length", spread(f.partitions))
	row("server down (kill → restart)", spread(f.serverDown))
	row("server restart → /readyz 200", spread(f.recoverReady))
	row("server restart → every other agent's session back", spread(f.recoverSessions))
	row("  restarts not recovered within 90 s / start failures", fmt.Sprintf("%d / %d", f.recoverMissed, f.serverStartFailures))
	row("disk held full", spread(f.diskFull))
	row("disk filled (MiB per fill)", spreadF(f.diskFilledMiB))
	row("writes refused 503 \"store cannot write\" (server log)", cannotWrite)
	row("run creations refused 503 / failed otherwise, retried", fmt.Sprintf("%d / %d", f.create503, f.createOther))

	ok := true
	verdict := func(what string, good bool, detail []string) {
		v := "yes"
		if !good {
			v, ok = "NO", false
		}
		fmt.Printf("%-54s %s\n", what, v)
		for i, d := range detail {
			if i == 20 {
				fmt.Printf("    ... %d more\n", len(detail)-20)
				break
			}
			fmt.Println("    " + d)
		}
	}
	fmt.Println("verdict")
	var openDetail []string
	if waitErr != nil {
		openDetail = append(openDetail, waitErr.Error())
	}
	for _, t := range tasks {
		if !api.TerminalState(t.State) {
			openDetail = append(openDetail, fmt.Sprintf("%s %s (src %s)", t.TaskID, t.State, t.SrcPodUID))
		}
	}
	verdict("every task ended", open == 0 && waitErr == nil && len(tasks) >= f.tasksCreated, openDetail)
	verdict("0 results lost", len(lost) == 0 && len(l.deadFiles) == 0 && len(l.leftInOutbox) == 0,
		append(lost, append(l.deadFiles, l.leftInOutbox...)...))
	verdict("0 tasks run twice", len(twice) == 0, twice)
	if b.c.keep {
		fmt.Println("logs:", b.dir)
	}
	return ok
}

func countStarts(l *ledger) int {
	n := 0
	for _, a := range l.started {
		n += len(a)
	}
	return n
}

// shortReason keeps a reason's head, without ids, for grouping.
func shortReason(r string) string {
	if i := strings.IndexAny(r, ":("); i > 0 {
		r = r[:i]
	}
	if len(r) > 60 {
		r = r[:60]
	}
	return strings.TrimSpace(r)
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sortedByCount(m map[string]int) []string {
	ks := sortedKeys(m)
	sort.SliceStable(ks, func(i, j int) bool { return m[ks[i]] > m[ks[j]] })
	return ks
}

// spread prints n, min, median and max of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	return fmt.Sprintf("%d: min %v, median %v, max %v", len(s), r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]))
}

func spreadF(fs []float64) string {
	if len(fs) == 0 {
		return "-"
	}
	s := slices.Clone(fs)
	slices.Sort(s)
	return fmt.Sprintf("%d: min %.1f, median %.1f, max %.1f", len(s), s[0], s[len(s)/2], s[len(s)-1])
}
