package bundle

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/cnperf/cnperf/internal/evaluate"
	"github.com/cnperf/cnperf/internal/hostinfo"
	"github.com/cnperf/cnperf/internal/report"
	"github.com/cnperf/cnperf/internal/suite"
)

// WriteText writes the sheet, the environment and, with reports, each
// suite run's report as `cnperf report` prints it.
func (b *Bundle) WriteText(w io.Writer, reg *suite.Registry, reports bool) error {
	var buf bytes.Buffer
	if err := b.Sheet.WriteText(&buf); err != nil {
		return err
	}
	if env := report.EnvironmentLines(b.Environment); len(env) > 0 {
		fmt.Fprintf(&buf, "\n%s\n", strings.Join(env, "\n  "))
	}
	if reports {
		reps, err := b.Reports(reg)
		if err != nil {
			return err
		}
		for _, r := range reps {
			buf.WriteString("\n")
			if err := r.WriteText(&buf); err != nil {
				return err
			}
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// WriteMarkdown writes the sheet and each report in Markdown.
func (b *Bundle) WriteMarkdown(w io.Writer, reg *suite.Registry) error {
	var buf bytes.Buffer
	if err := b.Sheet.WriteMarkdown(&buf); err != nil {
		return err
	}
	reps, err := b.Reports(reg)
	if err != nil {
		return err
	}
	for _, r := range reps {
		buf.WriteString("\n")
		if err := r.WriteMarkdown(&buf); err != nil {
			return err
		}
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// sheetPage is the template of the bundle's page: the sheet, then every
// report's body (tables and charts) as the report page draws it.
const sheetPage = `{{define "sheet-page"}}<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>cnperf verdict sheet</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{{template "report-style"}}
td.v-holds{color:#1b7f3b;font-weight:bold}td.v-fails{color:#b00020;font-weight:bold}td.v-partial{color:#b36b00;font-weight:bold}
td.v-not-asked,td.v-unknown{color:#777}table.sheet td{white-space:normal}</style></head>
<body><main>
<h1>Verdict sheet</h1>
<p class="meta">{{.Summary}}</p>
{{- with envLines .Env}}<details class="meta" id="environment" open><summary>{{index . 0}}</summary><ul>{{range slice . 1}}<li>{{.}}</li>{{end}}</ul></details>{{end}}
<table class="figures sheet" id="sheet">
<thead><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>
{{- range .Lines}}
<tr><td>{{.Question}}</td><td>{{index .Cells 1}}</td><td class="v-{{slug .Verdict}}">{{.Verdict}}</td><td>{{index .Cells 3}}</td><td>{{.Reason}}</td></tr>
{{- end}}
</tbody>
</table>
{{- range .Views}}
<section class="suite-report">
{{template "report-body" .}}
</section>
{{- end}}
<footer>Written by cnperf from a study bundle ({{.Schema}}); charts are inline SVG, no scripts or network access needed.</footer>
</main></body></html>
{{end}}`

// WriteHTML writes one self-contained page: the sheet, then each suite
// run's report with its charts (report's own templates).
func (b *Bundle) WriteHTML(w io.Writer, reg *suite.Registry) error {
	t, err := report.Templates()
	if err != nil {
		return err
	}
	if t, err = t.Parse(sheetPage); err != nil {
		return fmt.Errorf("parse sheet page: %w", err)
	}
	reps, err := b.Reports(reg)
	if err != nil {
		return err
	}
	views := make([]report.View, len(reps))
	for i, r := range reps {
		views[i] = report.NewView(r)
	}
	data := struct {
		Summary, Schema string
		Env             *hostinfo.Environment
		Header          []string
		Lines           []evaluate.Line
		Views           []report.View
	}{b.Sheet.Summary(), b.Schema, b.Environment, evaluate.Header, b.Sheet.Lines, views}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "sheet-page", data); err != nil {
		return fmt.Errorf("render sheet: %w", err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}
