package report

import (
	"fmt"
	"math"
	"time"

	"github.com/cnperf/cnperf/internal/api"
)

// CoverageMatrix lays the matrix's coverage out as a heat map of each
// ordered pair's age (hours since its latest measurement, sender ×
// receiver), the pairs never measured or older than overdue marked.
func CoverageMatrix(cov api.MatrixCoverage, overdue time.Duration) Matrix {
	idx := make(map[string]int, len(cov.Nodes))
	for i, n := range cov.Nodes {
		idx[n] = i
	}
	n := len(cov.Nodes)
	m := Matrix{Title: "Age of each pair's latest matrix measurement", Metric: "coverage.age_h", Label: "age",
		RowLabel: "sender node", ColLabel: "receiver node", Rows: cov.Nodes, Cols: cov.Nodes,
		Values: make([][]float64, n), Marked: make([][]bool, n),
		Mark: fmt.Sprintf(" (overdue: not measured within %s)", overdue)}
	for i := range m.Values {
		m.Values[i] = make([]float64, n)
		m.Marked[i] = make([]bool, n)
		for j := range m.Values[i] {
			m.Values[i][j] = math.NaN()
		}
	}
	for _, p := range cov.Pairs {
		i, okI := idx[p.Src]
		j, okJ := idx[p.Dst]
		if !okI || !okJ {
			continue
		}
		if age, ok := p.Age(cov.At); ok {
			m.Values[i][j] = age.Hours()
		}
		m.Marked[i][j] = p.Overdue(cov.At, overdue)
	}
	return m
}
