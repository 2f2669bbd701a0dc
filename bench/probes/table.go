package main

import (
	"fmt"
	"io"
	"math"
	"sort"
)

// row is one line of the final table.
type row struct {
	mode, test  string
	cnperf, ref string
	ratio       float64
	target      string
	met         bool
	notes       []string // printed under the table, one line each
}

func printTable(w io.Writer, rows []row) {
	fmt.Fprintf(w, "| mode | test | cnperf | reference | ratio | target | verdict |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		v := "met"
		if !r.met {
			v = "MISSED"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f | %s | %s |\n", r.mode, r.test, r.cnperf, r.ref, r.ratio, r.target, v)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		for _, n := range r.notes {
			fmt.Fprintf(w, "%s, %s: %s\n", r.mode, r.test, n)
		}
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
