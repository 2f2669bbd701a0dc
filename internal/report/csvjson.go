package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
)

// CSVHeader is the header of WriteCSV's output: one figure per line (tidy
// data), so spreadsheets and dataframes can pivot it as they like.
var csvHeader = []string{"run_id", "suite", "backend", "connection", "src", "dst", "metric", "unit", "median", "min", "max", "repetitions"}

// WriteCSV writes every figure of every row, one per line.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, row := range r.Rows {
		names := make([]string, 0, len(row.Median))
		for m := range row.Median {
			names = append(names, m)
		}
		sort.Strings(names)
		for _, m := range sortMetrics(names) {
			rec := []string{r.RunID, r.Suite, row.Backend, row.Connection, row.Src, row.Dst, m, Info(m).Unit,
				num(row.Median[m]), num(valueOr(row.Min, m)), num(valueOr(row.Max, m)), strconv.Itoa(row.Repetitions)}
			if err := cw.Write(rec); err != nil {
				return fmt.Errorf("write csv: %w", err)
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write csv: %w", err)
	}
	return nil
}

// WriteJSON writes the report as indented JSON: rows with their figures
// nested by name (as probe results are), the single outcomes, matrices and
// shaping series.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}
