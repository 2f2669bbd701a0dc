// Command matrixsim runs the matrix's pair plan over many simulated nodes
// in compressed time: each cycle's phases come from the suite's own Plan
// and Follow, every measurement is answered with a synthetic result (a
// few pairs slow or lossy on purpose) and kept as coverage in a real
// store (SQLite), and it prints the cycles until every ordered pair was
// covered against the plan's window, whether a node was ever in two
// pairs of a round, the cycle each bad pair was found and confirmed in,
// and the store's cost per result. It does not run the server's
// dispatch (see the report for what it leaves out).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cnperf/cnperf/internal/probe"
	"github.com/cnperf/cnperf/internal/store"
	"github.com/cnperf/cnperf/internal/suite"
	"github.com/cnperf/cnperf/internal/suite/matrix"
)

func main() {
	nodes := flag.Int("nodes", 1000, "simulated nodes")
	peers := flag.Int("peers", 3, "peers a node per cycle (plan=sample)")
	bad := flag.Int("bad", 6, "pairs made bad on purpose (half slow, half lossy)")
	store1 := flag.Int("store-every", 1, "keep every n-th result in the store (1: all)")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if err := run(*nodes, *peers, *bad, *store1, *seed); err != nil {
		log.Fatal(err)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(n, k, nBad, storeEvery int, seed uint64) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "matrixsim")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(ctx, "sqlite:"+filepath.Join(dir, "cnperf.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	eps := make([]suite.Endpoint, n)
	for i := range eps {
		node := fmt.Sprintf("node-%05d", i)
		eps[i] = suite.Endpoint{ID: "uid-" + node, Name: "cnperf-" + node, Node: node, IP: "10.0.0.1", ResponderAddr: "10.0.0.1:5201"}
	}
	w := matrix.Window(n, k)
	o := suite.Options{Time: 5 * time.Second, Repeat: 1, Set: map[string]string{"plan": "sample", "peers": strconv.Itoa(k), "cycles": strconv.Itoa(w)}}
	s := matrix.Suite{}
	fmt.Println(s.Announce(eps, o))
	badPairs := map[[2]string]string{}
	for len(badPairs) < nBad {
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
	covered := make([]bool, n*n)
	left := n * (n - 1)
	coveredAt := -1
	found, confirmed := map[[2]string]int{}, map[[2]string]int{}
	overlaps, results, stored, rounds := 0, 0, 0, 0
	var storeTime time.Duration
	cpu0, t0 := cpuTime(), time.Now()
	phases, err := s.Plan(eps, o, suite.Caps{})
	if err != nil {
		return err
	}
	var prev []suite.Outcome
	cycle := 0
	for len(phases) > 0 {
		var cur []suite.Outcome
		for _, ph := range phases {
			rounds++
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
				cur = append(cur, suite.Outcome{Step: stp, Result: r})
				results++
				i, j := index[pair[0]], index[pair[1]]
				if !covered[i*n+j] {
					covered[i*n+j] = true
					left--
					if left == 0 {
						coveredAt, _ = strconv.Atoi(stp.Labels[matrix.LabelCycle])
					}
				}
				if results%storeEvery == 0 {
					t := time.Now()
					if err := st.RecordMatrixPair(ctx, store.MatrixPair{Src: pair[0], Dst: pair[1], Measure: stp.Measure, RunID: "sim", MeasuredAt: t, Figures: "{}"}); err != nil {
						return err
					}
					storeTime += time.Since(t)
					stored++
				}
			}
		}
		// What the cycle's rows say: suspects of the last cycle confirmed
		// or not by this one's re-measures.
		for _, row := range s.Rows(append(prev, cur...)) {
			p := [2]string{row.Labels[matrix.LabelSrc], row.Labels[matrix.LabelDst]}
			if p[0] == "" {
				continue
			}
			if row.Labels[matrix.LabelOutlier] != "" {
				if _, ok := confirmed[p]; !ok {
					confirmed[p] = cycle
				}
			}
			if _, ok := found[p]; ok {
				continue
			}
			switch {
			case strings.HasSuffix(row.Labels[matrix.LabelSuspect], "not re-measured"):
				found[p] = cycle // flagged by this cycle's own measurement
			case row.Labels[matrix.LabelOutlier] != "" || row.Labels[matrix.LabelSuspect] != "":
				found[p] = cycle - 1
			}
		}
		if phases, err = s.Follow(eps, o, suite.Caps{}, cur); err != nil {
			return err
		}
		prev = cur
		cycle++
	}
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("nodes %d, peers %d: %d cycles run (%d rounds), %d results\n", n, k, cycle, rounds, results)
	fmt.Printf("every ordered pair covered by cycle %d (cycles 0..%d); the plan's window: %d cycles -> %s\n", coveredAt, coveredAt, w, verdict(coveredAt >= 0 && coveredAt < w))
	fmt.Printf("nodes in two pairs of one round: %d -> %s\n", overlaps, verdict(overlaps == 0))
	for p, what := range badPairs {
		f, okF := found[p]
		c, okC := confirmed[p]
		fs, cs := "never", "never"
		if okF {
			fs = fmt.Sprintf("cycle %d", f)
		}
		if okC {
			cs = fmt.Sprintf("cycle %d (%d cycles after it was found)", c, c-f)
		}
		fmt.Printf("bad pair %s -> %s, %s: found in %s, confirmed in %s\n", p[0], p[1], what, fs, cs)
	}
	falsePos := 0
	for p := range confirmed {
		if badPairs[p] == "" {
			falsePos++
		}
	}
	fmt.Printf("pairs confirmed as outliers that were not made bad: %d\n", falsePos)
	fmt.Printf("store: %d results kept, %.0f µs a result (SQLite, one writer)\n", stored, float64(storeTime.Microseconds())/float64(max(stored, 1)))
	fmt.Printf("planning and judging: %s wall, %s CPU, %.1f µs CPU a result; heap %d MB after (Go runtime's view)\n",
		elapsed.Round(time.Millisecond), cpu.Round(time.Millisecond), float64(cpu.Microseconds())/float64(results), ms.HeapAlloc>>20)
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
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
