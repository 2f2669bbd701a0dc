// Command matrixsim runs the matrix's pair plan over many simulated nodes
// in compressed time: each cycle's phases come from the suite's own Plan
// and Follow, every measurement is answered with a synthetic result (a
// few pairs slow or lossy on purpose) and kept as its pair's coverage by
// the server's own function (server.KeepMatrixResult) in a real store
// (SQLite), and the last cycle's rows are a schedule's summary that the
// server's /metrics handler renders. It prints the plan's statement, the
// cycle by which every ordered pair was covered against the plan's
// window, whether a node was ever in two pairs of a round, the cycle each
// bad pair was found and confirmed in, /metrics' matrix series against
// the budget, and the cost per result; it exits 1 when a check fails.
// Tasks are not dispatched to agents (make bench-server measures that).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"maps"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/metrics"
	"github.com/cnperf/cnperf/internal/pairplan"
	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/schedule"
	"github.com/cnperf/cnperf/internal/server"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

type config struct {
	nodes, peers, repeat, bad, storeReps, budget, cycles int
	dispatchPairs                                        int
	time, overhead                                       time.Duration
	seed                                                 uint64
	dir                                                  string
}

func main() {
	var c config
	flag.IntVar(&c.nodes, "nodes", 1000, "simulated nodes")
	flag.IntVar(&c.peers, "peers", 3, "peers a node per cycle (the sample plan's k)")
	flag.DurationVar(&c.time, "time", 5*time.Second, "the matrix's --time (TCP and UDP measurement length)")
	flag.IntVar(&c.repeat, "repeat", 2, "the matrix's --repeat (each pair measured this often a cycle; 2, docs/matrix.md's default at 1,000 nodes)")
	flag.DurationVar(&c.overhead, "task-overhead", 500*time.Millisecond, "simulated time a task costs beyond its measurement (dispatch, connect, report)")
	flag.IntVar(&c.bad, "bad", 6, "pairs made bad on purpose (half slow, half lossy)")
	flag.IntVar(&c.storeReps, "store-reps", 1, "results of a pair's measure a cycle written to the store: its first n repetitions (the server writes every one, to the same row)")
	flag.IntVar(&c.budget, "metrics-pair-budget", metrics.DefaultPairBudget, "the server's --metrics-pair-budget")
	flag.IntVar(&c.cycles, "cycles", 0, "cycles to run (0: the plan's window; fewer leave coverage and the bad pairs unchecked)")
	flag.IntVar(&c.dispatchPairs, "dispatch-pairs", 20, "pairs of each cycle's first round whose TCP measurement goes through the server (a run created over the API, offered over an agent's session, answered; 0: none)")
	flag.StringVar(&c.dir, "dir", "", "directory for the SQLite store (default: the temp dir; /dev/shm keeps a busy disk out of the figures)")
	flag.Uint64Var(&c.seed, "seed", 1, "random seed")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile to this file")
	memprof := flag.String("memprofile", "", "write a heap profile to this file at the end")
	flag.Parse()
	if c.nodes < 3 || c.peers < 1 || c.repeat < 1 || c.storeReps < 1 || c.budget < 1 || c.cycles < 0 || c.dispatchPairs < 0 || c.bad < 0 || c.bad > c.nodes*(c.nodes-1)/2 {
		log.Fatalf("matrixsim: want -nodes of 3 or more, -peers, -repeat, -store-reps and -metrics-pair-budget of 1 or more, and -bad of 0 to half the pairs")
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
	}
	ok, unchecked, err := run(c)
	pprof.StopCPUProfile()
	if *memprof != "" {
		f, err := os.Create(*memprof)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			log.Fatal(err)
		}
		f.Close()
	}
	if err != nil {
		log.Fatal(err)
	}
	if !ok {
		fmt.Println("FAIL: a check above is NOT MET")
		os.Exit(1)
	}
	if unchecked > 0 {
		fmt.Printf("PASS: every check run met; %d not checked (-cycles)\n", unchecked)
		return
	}
	fmt.Println("PASS: every check met")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func maxRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Maxrss << 10 // KB on Linux
}

// stepTime is a step's simulated length: its measurement and the task's
// overhead.
func stepTime(st suite.Step, overhead time.Duration) time.Duration {
	d := st.Spec.DurationOr(0)
	if d == 0 && st.Spec.Count > 0 {
		d = time.Duration(st.Spec.Count) * st.Spec.IntervalOr(time.Second)
	}
	return st.Spec.StartDelay.D() + d + overhead // the pair's jitter, if any, first
}

// roundTime is a phase's simulated length: its longest pair's steps one
// after another (a pair's measurements are exclusive, so sequential).
func roundTime(ph suite.Phase, overhead time.Duration) time.Duration {
	per := map[[2]string]time.Duration{}
	var longest time.Duration
	for _, st := range ph.Steps {
		p := [2]string{st.Src.Node, st.Dst.Node}
		per[p] += stepTime(st, overhead)
		longest = max(longest, per[p])
	}
	return longest
}

type verdicts struct {
	failed    bool
	unchecked int
}

// checkIf is check, unless the run was cut short (-cycles) before the
// check could hold.
func (v *verdicts) checkIf(whole, ok bool) string {
	if !whole {
		v.unchecked++
		return "not checked (-cycles ends the run before the window)"
	}
	return v.check(ok)
}

func (v *verdicts) check(ok bool) string {
	if ok {
		return "met"
	}
	v.failed = true
	return "NOT MET"
}

func run(c config) (bool, int, error) {
	ctx := context.Background()
	var v verdicts
	dir, err := os.MkdirTemp(c.dir, "matrixsim")
	if err != nil {
		return false, 0, err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "cnperf.db"))
	if err != nil {
		return false, 0, err
	}
	defer st.Close()
	rng := rand.New(rand.NewPCG(c.seed, c.seed+1))
	n := c.nodes
	eps := make([]suite.Endpoint, n)
	for i := range eps {
		node := fmt.Sprintf("node-%05d", i)
		eps[i] = suite.Endpoint{ID: "uid-" + node, Name: "cnperf-" + node, Node: node, IP: "10.0.0.1", ResponderAddr: "10.0.0.1:5201"}
	}
	w := pairplan.Window(n, c.peers)
	var disp *dispatcher
	if c.dispatchPairs > 0 {
		t := time.Now()
		if disp, err = startDispatch(ctx, st, eps); err != nil {
			return false, 0, err
		}
		defer disp.stop()
		fmt.Printf("server: %d simulated agents' sessions open in %s\n", n, time.Since(t).Round(time.Second))
	}
	// As a schedule runs it (--every a cycle): one cycle a run, the
	// scheduler setting "cycle" to the run's number.
	// A run measures one cycle ("cycles" 1, as the scheduler sets it):
	// without it a run's Follow plans the cycles after it too, to the
	// window's end.
	opts := func(cycle int) suite.Options {
		return suite.Options{Time: c.time, Repeat: c.repeat, Set: map[string]string{"plan": "sample", "peers": strconv.Itoa(c.peers), "cycle": strconv.Itoa(cycle), "cycles": "1"}}
	}
	s := matrix.Suite{}
	whole := opts(0)
	delete(whole.Set, "cycles")
	fmt.Println(s.Announce(eps, whole))
	phases, err := s.Plan(eps, opts(0), suite.Caps{})
	if err != nil {
		return false, 0, err
	}
	var cycleTime time.Duration
	for _, ph := range phases {
		cycleTime += roundTime(ph, c.overhead)
	}
	fmt.Printf("at --time %s --repeat %d (%s a task beyond its measurement): cycle 0 has %d phases, %s of simulated time; the window of %d such cycles %.1f h\n",
		c.time, c.repeat, c.overhead, len(phases), cycleTime.Round(time.Second), w, (time.Duration(w) * cycleTime).Hours())

	badPairs := map[[2]string]string{}
	for len(badPairs) < c.bad {
		a, b := rng.IntN(n), rng.IntN(n)
		if a == b {
			continue
		}
		what := "slow (1 Gbit/s of 10)"
		if len(badPairs)%2 == 1 {
			what = "lossy (5 % UDP loss)"
		}
		badPairs[[2]string{eps[a].Node, eps[b].Node}] = what
	}
	index := map[string]int{}
	for i, e := range eps {
		index[e.Node] = i
	}
	sc, err := st.CreateSchedule(ctx, store.Schedule{Suite: matrix.SuiteName, Every: cycleTime.Round(time.Minute) + time.Minute, Options: []byte("{}")}, time.Now())
	if err != nil {
		return false, 0, err
	}
	covered := make([]bool, n*n)
	left := n * (n - 1)
	coveredAt := -1
	found, confirmed := map[[2]string]int{}, map[[2]string]int{}
	overlaps, results, stored, rounds := 0, 0, 0, 0
	var storeTime, storeCPU, dispatchCPU, simTime, summaryTime, coverTime time.Duration
	var shortest, longest time.Duration // a cycle's simulated time, its re-measures in
	var longestPlain time.Duration      // a cycle's simulated time without them
	minRounds, maxRounds := 0, 0
	var writeLat []time.Duration // every 16th store write
	var lastRows []suite.Row
	cpu0, t0 := cpuTime(), time.Now()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	runs := w
	if c.cycles > 0 {
		runs = min(c.cycles, w)
	}
	for cycle := 0; cycle < runs; cycle++ {
		o := opts(cycle)
		if phases, err = s.Plan(eps, o, suite.Caps{}); err != nil {
			return false, 0, err
		}
		var outs []suite.Outcome
		start, plain := simTime, len(phases)/c.repeat
		var own time.Duration
		for _, ph := range phases {
			own += roundTime(ph, c.overhead)
		}
		longestPlain = max(longestPlain, own)
		firstRound := true
		for len(phases) > 0 {
			for _, ph := range phases {
				var viaServer []dispatched
				rounds++
				simTime += roundTime(ph, c.overhead)
				busy := map[string]string{}
				for _, stp := range ph.Steps {
					pair := [2]string{stp.Src.Node, stp.Dst.Node}
					for _, node := range pair {
						if other, ok := busy[node]; ok && other != pair[0]+">"+pair[1] {
							overlaps++
						}
						busy[node] = pair[0] + ">" + pair[1]
					}
					r := answer(stp.Measure, badPairs[pair], rng)
					outs = append(outs, suite.Outcome{Step: stp, Result: r})
					results++
					if firstRound && disp != nil && stp.Measure == suite.MeasureTCP && stp.Repeat == 0 && len(viaServer) < c.dispatchPairs {
						// Through the server, which keeps it as coverage.
						viaServer = append(viaServer, dispatched{step: stp, result: marshalResult(r)})
						covered, left, coveredAt = cover(covered, left, coveredAt, index, pair, n, cycle)
						continue
					}
					covered, left, coveredAt = cover(covered, left, coveredAt, index, pair, n, cycle)
					if stp.Repeat >= c.storeReps {
						continue
					}
					raw, err := json.Marshal(r)
					if err != nil {
						return false, 0, err
					}
					c0, t := cpuTime(), time.Now()
					if err := server.KeepMatrixResult(ctx, st, "sim", pair[0], pair[1], t0.Add(simTime), raw); err != nil {
						return false, 0, err
					}
					d := time.Since(t)
					storeTime += d
					storeCPU += cpuTime() - c0
					if stored%16 == 0 {
						writeLat = append(writeLat, d)
					}
					stored++
				}
				if len(viaServer) > 0 {
					c0 := cpuTime()
					if err := disp.round(ctx, viaServer); err != nil {
						return false, 0, err
					}
					dispatchCPU += cpuTime() - c0
				}
				firstRound = false
			}
			// The re-measures of the cycle's suspects, in the same run.
			if phases, err = s.Follow(eps, o, suite.Caps{}, outs); err != nil {
				return false, 0, err
			}
		}
		took := simTime - start
		if cycle == 0 || took < shortest {
			shortest = took
		}
		longest = max(longest, took)
		if cycle == 0 || plain < minRounds {
			minRounds = plain
		}
		maxRounds = max(maxRounds, plain)
		if coveredAt == cycle {
			coverTime = simTime
		}
		lastRows = s.Rows(outs)
		for _, row := range lastRows {
			p := [2]string{row.Labels[matrix.LabelSrc], row.Labels[matrix.LabelDst]}
			if p[0] == "" {
				continue
			}
			if row.Labels[matrix.LabelOutlier] != "" || row.Labels[matrix.LabelSuspect] != "" {
				if _, ok := found[p]; !ok {
					found[p] = cycle
				}
			}
			if row.Labels[matrix.LabelOutlier] != "" {
				if _, ok := confirmed[p]; !ok {
					confirmed[p] = cycle
				}
			}
		}
		// The run's record, as the scheduler keeps it (/metrics reads
		// the latest).
		t := time.Now()
		if err := recordRun(ctx, st, &sc, lastRows, cycle); err != nil {
			return false, 0, err
		}
		summaryTime += time.Since(t)
		if (cycle+1)%max(runs/20, 1) == 0 {
			fmt.Fprintf(os.Stderr, "matrixsim: cycle %d of %d, %s wall, %s CPU\n", cycle+1, runs, time.Since(t0).Round(time.Second), (cpuTime() - cpu0).Round(time.Second))
		}
	}
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)

	fmt.Printf("nodes %d, peers %d, repeat %d: %d cycles run as %d schedule runs (%d phases), %d results, %.1f h of simulated time\n", n, c.peers, c.repeat, runs, runs, rounds, results, simTime.Hours())
	fmt.Printf("cycles of %d to %d rounds, %s to %s of simulated time with their re-measures\n", minRounds, maxRounds, shortest.Round(time.Second), longest.Round(time.Second))
	fmt.Printf("every ordered pair covered by cycle %d (cycles 0..%d); the plan's window: %d cycles -> %s\n", coveredAt, coveredAt, w, v.checkIf(runs == w, coveredAt >= 0 && coveredAt < w))
	fmt.Printf("simulated time until every pair was covered, cycles back to back: %.1f h -> within 24 h: %s\n", coverTime.Hours(), v.checkIf(runs == w, coveredAt >= 0 && coverTime <= 24*time.Hour))
	every := longestPlain.Truncate(time.Minute) + time.Minute
	fmt.Printf("as a schedule at --every %s (the longest cycle without re-measures; one with them may skip a due time): the window takes %.1f h or more\n", every, (time.Duration(w) * every).Hours())
	fmt.Printf("nodes in two pairs of one round (two throughput tests at once): %d -> %s\n", overlaps, v.check(overlaps == 0))
	for _, p := range slices.SortedFunc(maps.Keys(badPairs), func(a, b [2]string) int { return strings.Compare(a[0]+a[1], b[0]+b[1]) }) {
		f, okF := found[p]
		cc, okC := confirmed[p]
		fs, cs := "never", "never"
		if okF {
			fs = fmt.Sprintf("cycle %d", f)
		}
		if okC {
			cs = fmt.Sprintf("cycle %d (%d after)", cc, cc-f)
		}
		fmt.Printf("bad pair %s -> %s, %s: found in %s, confirmed in %s -> %s\n", p[0], p[1], badPairs[p], fs, cs, v.checkIf(runs == w || (okF && okC), okF && okC))
	}
	falsePos := 0
	for p := range confirmed {
		if badPairs[p] == "" {
			falsePos++
		}
	}
	fmt.Printf("pairs confirmed as outliers that were not made bad: %d -> %s\n", falsePos, v.check(falsePos == 0))

	// The store's view, as `cnperf matrix coverage` counts it.
	tally, err := st.TallyMatrixPairs(ctx, t0)
	if err != nil {
		return false, 0, err
	}
	fmt.Printf("store: %d ordered pairs kept as coverage (as `cnperf matrix coverage` counts them) of %d -> %s\n", tally.Pairs, n*(n-1), v.checkIf(runs == w, tally.Pairs == n*(n-1)))

	if err := checkMetrics(ctx, st, c, n, lastRows, &v); err != nil {
		return false, 0, err
	}

	slices.Sort(writeLat)
	pct := func(q float64) time.Duration {
		if len(writeLat) == 0 {
			return 0
		}
		return writeLat[min(len(writeLat)-1, int(q*float64(len(writeLat))))]
	}
	fmt.Printf("store writes (server.KeepMatrixResult, SQLite in %s, one writer): %d (the first %d of %d repetitions of each pair's measures a cycle), %.0f µs wall and %.0f µs CPU a write; p50 %s, p99 %s, max %s (of every 16th)\n",
		filepath.Dir(dir)+"/", stored, min(c.storeReps, c.repeat), c.repeat, us(storeTime, stored), us(storeCPU, stored), pct(0.5), pct(0.99), pct(1))
	fmt.Printf("schedule run records (the summary of each run's rows, as the scheduler keeps them): %.1f ms a run\n", float64(summaryTime.Microseconds())/1e3/float64(runs))
	judge := cpu - storeCPU - dispatchCPU
	fmt.Printf("planning and judging (Plan, Follow, Rows, as the server's scheduler runs them): %.1f µs CPU a result\n", us(judge, results))
	fmt.Printf("server CPU a result (judging + one store write, as the server writes each result): %.1f µs; allocated %.0f bytes a result; heap %d MB after, peak RSS %d MB; %s wall, %s CPU in all\n",
		us(judge, results)+us(storeCPU, stored), float64(ms.TotalAlloc-ms0.TotalAlloc)/float64(results), ms.HeapAlloc>>20, maxRSS()>>20, elapsed.Round(time.Second), cpu.Round(time.Second))
	if disp != nil {
		disp.report(dispatchCPU)
	}
	return !v.failed, v.unchecked, nil
}

// cover marks pair measured in cycle, noting the cycle the last pair
// was.
func cover(covered []bool, left, coveredAt int, index map[string]int, pair [2]string, n, cycle int) ([]bool, int, int) {
	if i, j := index[pair[0]], index[pair[1]]; !covered[i*n+j] {
		covered[i*n+j] = true
		if left--; left == 0 {
			coveredAt = cycle
		}
	}
	return covered, left, coveredAt
}

func us(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(max(n, 1)) }

// recordRun keeps a schedule run's record with the run's summary, as
// the scheduler does when a run ends.
func recordRun(ctx context.Context, st store.Store, sc *store.Schedule, rows []suite.Row, cycle int) error {
	now := time.Now()
	due, next := sc.NextAt, sc.NextAt.Add(sc.Every)
	rec, err := st.StartScheduleRun(ctx, sc.ID, due, next, now, now.Add(-time.Hour))
	if err != nil {
		return fmt.Errorf("start schedule run %d: %w", cycle, err)
	}
	sc.NextAt = next
	sum := schedule.Summarize(rows, nil, false)
	sum.NextCycle = cycle + 1
	raw, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	if _, err := st.FinishScheduleRun(ctx, rec.ID, store.ScheduleSucceeded, "", []string{fmt.Sprintf("sim-%d", cycle)}, raw, now); err != nil {
		return fmt.Errorf("finish schedule run %d: %w", cycle, err)
	}
	return nil
}

// checkMetrics renders the server's /metrics handler over the store,
// whose latest schedule run holds the last cycle's rows: the
// cnperf_matrix_* series by family, the node pairs exported against the
// budget.
func checkMetrics(ctx context.Context, st store.Store, c config, n int, rows []suite.Row, v *verdicts) error {
	h := metrics.New(st, metrics.Options{PairBudget: c.budget}).Handler()
	// A render's wall time and the process's CPU meanwhile (the agents'
	// sessions idle), which a busy machine does not inflate.
	type cost struct{ wall, cpu time.Duration }
	render := func() (*httptest.ResponseRecorder, cost, error) {
		rw := httptest.NewRecorder()
		t, c0 := time.Now(), cpuTime()
		h.ServeHTTP(rw, httptest.NewRequest("GET", "/metrics", nil))
		if rw.Code != 200 {
			return nil, cost{}, fmt.Errorf("/metrics: status %d", rw.Code)
		}
		return rw, cost{time.Since(t), cpuTime() - c0}, nil
	}
	// The first scrape after a run reads its summary; the later ones,
	// until the next run, do not.
	rw, took, err := render()
	if err != nil {
		return err
	}
	var again cost
	for range 3 {
		_, d, err := render()
		if err != nil {
			return err
		}
		again = cost{max(again.wall, d.wall), max(again.cpu, d.cpu)}
	}
	families := map[string]int{}
	pairs := map[string]bool{}
	total, all := 0, 0
	sc2 := bufio.NewScanner(rw.Body)
	sc2.Buffer(make([]byte, 1<<20), 1<<20)
	for sc2.Scan() {
		line := sc2.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		all++
		if !strings.HasPrefix(line, "cnperf_matrix_") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		families[name]++
		total++
		if strings.HasPrefix(name, "cnperf_matrix_pair_") {
			pairs[labelOf(line, "src_node")+" > "+labelOf(line, "dst_node")] = true
		}
	}
	if err := sc2.Err(); err != nil {
		return err
	}
	nodeRows, pairRows := 0, 0
	for _, r := range rows {
		if r.Labels[matrix.LabelNode] != "" {
			nodeRows++
		} else if r.Labels[matrix.LabelSrc] != "" {
			pairRows++
		}
	}
	fmt.Printf("/metrics (the server's handler, over the latest schedule run's %d pairs and %d nodes): rendered in %s (%s CPU) after the run, at most %s (%s CPU) in the 3 scrapes after; %d series in all, %d cnperf_matrix_*:\n",
		pairRows, nodeRows, took.wall.Round(time.Millisecond), took.cpu.Round(time.Millisecond), again.wall.Round(time.Millisecond), again.cpu.Round(time.Millisecond), all, total)
	for _, f := range slices.Sorted(maps.Keys(families)) {
		fmt.Printf("  %-52s %d\n", f, families[f])
	}
	// 8 a node (throughput and RR, out and in, median and worst), 6 a
	// pair (throughput, 3 round trips, loss, outlier), 1 pair count.
	bound := 8*n + 6*c.budget + 1
	fmt.Printf("pairs exported %d, budget %d -> %s; cnperf_matrix_* series %d, bound 8 a node + 6 a budgeted pair + 1 = %d (N² would be %d) -> %s\n",
		len(pairs), c.budget, v.check(len(pairs) <= c.budget), total, bound, n*(n-1), v.check(total <= bound && total > 0))
	return nil
}

func labelOf(line, name string) string {
	i := strings.Index(line, name+"=\"")
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

// answer is a synthetic result: 10 Gbit/s ± 5 %, 0.1 ms, no loss; a
// slow pair has a tenth of the rate, a lossy one 5 % UDP loss.
func answer(measure, bad string, rng *rand.Rand) *probe.Result {
	noise := 1 + 0.1*(rng.Float64()-0.5)
	switch measure {
	case suite.MeasureTCP:
		bps := 10e9 * noise
		if bad != "" && bad[0] == 's' {
			bps /= 10
		}
		return &probe.Result{Kind: probe.KindTCP, DurationS: 5, ThroughputBps: &probe.SenderReceiver{Sender: bps, Receiver: bps}}
	case suite.MeasureUDP:
		loss := 0.0
		if bad != "" && bad[0] == 'l' {
			loss = 5
		}
		return &probe.Result{Kind: probe.KindUDP, DurationS: 5, LossPct: probe.Float(loss)}
	case suite.MeasureRR:
		return &probe.Result{Kind: probe.KindRR, DurationS: 1, RTTms: &probe.Summary{P50: 0.1 * noise, P99: 0.2 * noise, Avg: 0.1 * noise}}
	}
	return &probe.Result{Kind: probe.KindPing, DurationS: 0.1, RTTms: &probe.Summary{Avg: 0.1 * noise, P50: 0.1 * noise}, LossPct: probe.Float(0)}
}
