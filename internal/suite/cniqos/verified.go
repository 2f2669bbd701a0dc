package cniqos

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// A Verified is one verdict row of the real-cluster test's record
// (docs/cni-qos-verified.json): a feature's verdict on one CNI and
// datapath mode, with a short figure for the docs' table and the full
// reason.
type Verified struct {
	CNI         string `json:"cni"`
	Mode        string `json:"mode"`
	Feature     string `json:"feature"`
	Annotations string `json:"annotations,omitempty"`
	Verdict     string `json:"verdict"`
	Figure      string `json:"figure"`
	Why         string `json:"why"`
}

// The docs' table of verified features sits between these markers in
// docs/qos.md; VerifiedTable writes what is between them.
const (
	TableBegin = "<!-- cni-qos:begin -->"
	TableEnd   = "<!-- cni-qos:end -->"
)

// NewVerified is the record of a cni-qos row (its labels and medians as
// the suite wrote them) on cni in mode.
func NewVerified(cni, mode string, labels map[string]string, median map[string]float64) Verified {
	return Verified{CNI: cni, Mode: mode, Feature: labels[LabelFeature], Annotations: labels[LabelSet],
		Verdict: labels[LabelVerdict], Figure: figure(labels, median), Why: labels[LabelWhy]}
}

// figure is a row's measured figure in a few words, from its medians; a
// row without them (not tried, not measured) gives its reason, cut to
// its first clause (a reason not to try: before its detail) and a dozen
// words.
func figure(labels map[string]string, m map[string]float64) string {
	has := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				return false
			}
		}
		return true
	}
	switch labels[LabelClass] {
	case ClassBandwidth:
		if has("steady_state_bps", "first_interval_bps") {
			return fmt.Sprintf("%.1f Mbit/s steady, first 100 ms %.0f Mbit/s", m["steady_state_bps"]/1e6, m["first_interval_bps"]/1e6)
		}
	case ClassPacketRate:
		if has("received_pps", "offered_pps") {
			return fmt.Sprintf("%.0f of %.0f packets/s arrived", m["received_pps"], m["offered_pps"])
		}
	case ClassConnections:
		if has("held", "attempted") {
			return fmt.Sprintf("%.0f of %.0f connections open at once", m["held"], m["attempted"])
		}
	case ClassDSCP:
		if has("dscp_received.leaving", "dscp_received.pod") {
			return fmt.Sprintf("%.0f leaving the cluster, %.0f pod to pod", m["dscp_received.leaving"], m["dscp_received.pod"])
		}
	case ClassPriority:
		if has("rr_p50_ms.prio", "rr_p50_ms.plain") {
			return fmt.Sprintf("rr p50 %.2f ms with, %.2f ms without", m["rr_p50_ms.prio"], m["rr_p50_ms.plain"])
		}
	}
	why, _, _ := strings.Cut(labels[LabelWhy], "; ")
	if labels[LabelVerdict] == Untried {
		why, _, _ = strings.Cut(why, ": ")
	}
	if w := strings.Fields(why); len(w) > 12 {
		why = strings.Join(w[:12], " ") + " …"
	}
	return why
}

// MergeVerified replaces rec's rows of cni in mode with rows, keeping
// the others: CNIs in the table's order, modes in the order first
// recorded, features in the table's order.
func MergeVerified(rec []Verified, cni, mode string, rows []Verified) []Verified {
	modes := map[string][]string{}
	for _, v := range append(slices.Clone(rec), Verified{CNI: cni, Mode: mode}) {
		if !slices.Contains(modes[v.CNI], v.Mode) {
			modes[v.CNI] = append(modes[v.CNI], v.Mode)
		}
	}
	out := slices.DeleteFunc(slices.Clone(rec), func(v Verified) bool { return v.CNI == cni && v.Mode == mode })
	out = append(out, rows...)
	rank := func(list []string, s string) int {
		if i := slices.Index(list, s); i >= 0 {
			return i
		}
		return len(list)
	}
	cnis := CNIs()
	slices.SortStableFunc(out, func(a, b Verified) int {
		if a.CNI != b.CNI {
			if c := rank(cnis, a.CNI) - rank(cnis, b.CNI); c != 0 {
				return c
			}
			return strings.Compare(a.CNI, b.CNI)
		}
		if c := rank(modes[a.CNI], a.Mode) - rank(modes[a.CNI], b.Mode); c != 0 {
			return c
		}
		return featureRank(a.CNI, a.Feature) - featureRank(b.CNI, b.Feature)
	})
	return out
}

// VerifiedTable is the docs' table of rec: a line per CNI and feature,
// its modes one after another, and modes with the same verdict and
// figure on one line.
func VerifiedTable(rec []Verified) string {
	rows := slices.Clone(rec)
	first := map[string]int{}
	for i, v := range rows {
		if _, ok := first[v.CNI]; !ok {
			first[v.CNI] = i
		}
	}
	slices.SortStableFunc(rows, func(a, b Verified) int {
		if a.CNI != b.CNI {
			return first[a.CNI] - first[b.CNI]
		}
		return featureRank(a.CNI, a.Feature) - featureRank(b.CNI, b.Feature)
	})
	var b strings.Builder
	b.WriteString("| CNI, mode | feature | verdict | figure or reason |\n|---|---|---|---|\n")
	for i := 0; i < len(rows); {
		v, modes := rows[i], []string{rows[i].Mode}
		for i++; i < len(rows) && rows[i].CNI == v.CNI && rows[i].Feature == v.Feature && rows[i].Verdict == v.Verdict && rows[i].Figure == v.Figure; i++ {
			modes = append(modes, rows[i].Mode)
		}
		fmt.Fprintf(&b, "| %s %s | `%s` | %s | %s |\n", v.CNI, strings.Join(modes, ", "), v.Feature, v.Verdict, strings.ReplaceAll(v.Figure, "|", "/"))
	}
	return b.String()
}

// featureRank is the place of cni's feature in the table (unknown ones
// last).
func featureRank(cni, feature string) int {
	fs := For(cni)
	if i := slices.IndexFunc(fs, func(f Feature) bool { return f.Name == feature }); i >= 0 {
		return i
	}
	return len(fs)
}

// SetTable returns doc with the text between TableBegin and TableEnd
// replaced by table.
func SetTable(doc, table string) (string, error) {
	before, rest, ok := strings.Cut(doc, TableBegin+"\n")
	if !ok {
		return "", fmt.Errorf("no line %s", TableBegin)
	}
	_, after, ok := strings.Cut(rest, TableEnd)
	if !ok {
		return "", fmt.Errorf("no %s after %s", TableEnd, TableBegin)
	}
	return before + TableBegin + "\n" + table + TableEnd + after, nil
}

// ReadVerified reads a record; a missing file is an empty record.
func ReadVerified(path string) ([]Verified, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cni-qos record: %w", err)
	}
	var rec []Verified
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("cni-qos record %s: %w", path, err)
	}
	return rec, nil
}

// UpdateVerified merges rows (cni in mode) into the record at recordPath
// and rewrites the table in the doc at docPath from it. Nothing is
// written when either cannot be read or the doc has no markers.
func UpdateVerified(recordPath, docPath, cni, mode string, rows []Verified) error {
	rec, err := ReadVerified(recordPath)
	if err != nil {
		return err
	}
	rec = MergeVerified(rec, cni, mode, rows)
	doc, err := os.ReadFile(docPath)
	if err != nil {
		return fmt.Errorf("cni-qos table: %w", err)
	}
	out, err := SetTable(string(doc), VerifiedTable(rec))
	if err != nil {
		return fmt.Errorf("cni-qos table in %s: %w", docPath, err)
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(recordPath, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("cni-qos record: %w", err)
	}
	if err := os.WriteFile(docPath, []byte(out), 0o644); err != nil {
		return fmt.Errorf("cni-qos table: %w", err)
	}
	return nil
}
