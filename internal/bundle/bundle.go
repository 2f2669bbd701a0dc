// Package bundle is the study's self-contained file (schema
// cnperf.bundle/v1): the verdict sheet, every suite run behind it (the
// runs as the server answered them, so each report is rebuilt exactly as
// `cnperf report RUN_ID` builds it) with their rows, and the environment
// the study ran on. It reads and writes bundles, renders one like a run
// (text, Markdown, HTML with the reports' charts) and compares any number
// of them side by side, a column per CNI, mode or distribution, with no
// server.
package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cnperf/cnperf/internal/api"
	"github.com/cnperf/cnperf/internal/evaluate"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
)

// Schema is the schema every bundle carries; a file with another is
// refused.
const Schema = "cnperf.bundle/v1"

// MaxSize bounds the file Read accepts.
const MaxSize = 256 << 20

// Bundle is one study.
type Bundle struct {
	Schema    string    `json:"schema"`
	CreatedAt time.Time `json:"created_at"`
	// Version is the cnperf that wrote it.
	Version string `json:"cnperf_version,omitempty"`
	// Name labels the bundle where no environment field tells bundles
	// apart (the file's name when read).
	Name        string                `json:"name,omitempty"`
	Environment *hostinfo.Environment `json:"environment,omitempty"`
	Sheet       evaluate.Sheet        `json:"sheet"`
	Suites      []SuiteRun            `json:"suites"`
}

// SuiteRun is one suite's run in the study: its rows, for readers of the
// file (cnperf itself rebuilds them from Runs, see Reports), and the runs
// they come from.
type SuiteRun struct {
	Suite   string        `json:"suite"`
	RunIDs  []string      `json:"run_ids"`
	Options suite.Options `json:"options"`
	// Rows are as `cnperf run --json` writes them (suite.Row's JSON).
	Rows json.RawMessage `json:"rows"`
	Runs []api.Run       `json:"runs"`
}

// New makes the bundle of an evaluation.
func New(res *evaluate.Result, version string, now time.Time) (*Bundle, error) {
	b := &Bundle{Schema: Schema, CreatedAt: now.UTC(), Version: version, Sheet: res.Sheet}
	for _, r := range res.Reports {
		if b.Environment == nil {
			b.Environment = r.Environment
		}
		rows, err := json.Marshal(r.Rows)
		if err != nil {
			return nil, fmt.Errorf("rows of %s: %w", r.Suite, err)
		}
		b.Suites = append(b.Suites, SuiteRun{Suite: r.Suite, RunIDs: r.RunIDs, Options: r.Options, Rows: rows, Runs: r.Runs})
	}
	return b, nil
}

// Write writes b as indented JSON.
func (b *Bundle) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(b)
}

// Decode reads a bundle, refusing another schema or trailing data.
func Decode(r io.Reader) (*Bundle, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("larger than %d MiB", MaxSize>>20)
	}
	var head struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("not a cnperf bundle (JSON): %w", err)
	}
	if head.Schema != Schema {
		return nil, fmt.Errorf("schema %q: want %q (a file written by cnperf evaluate --out)", head.Schema, Schema)
	}
	var b Bundle
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&b); err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	if dec.More() {
		return nil, errors.New("bundle: data after the bundle")
	}
	return &b, nil
}

// Read reads the bundle in file path; its Name defaults to the path.
func Read(path string) (*Bundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := Decode(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if b.Name == "" {
		b.Name = path
	}
	return b, nil
}

// IsBundle reports whether path is a file that starts like a bundle (a
// JSON object): what compare and report take as a file, not a run id.
func IsBundle(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}

// Reports rebuilds each suite run's report from its stored runs
// (report.FromRuns, as `cnperf report RUN_ID` does).
func (b *Bundle) Reports(reg *suite.Registry) ([]*report.Report, error) {
	var out []*report.Report
	for _, s := range b.Suites {
		if len(s.Runs) == 0 {
			continue
		}
		r, err := report.FromRuns(reg, s.Runs...)
		if err != nil {
			return nil, fmt.Errorf("suite %s: %w", s.Suite, err)
		}
		out = append(out, r)
	}
	return out, nil
}
