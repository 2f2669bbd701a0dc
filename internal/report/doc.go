// Package report turns a run's stored results into what people read: a
// terminal or markdown table laid out like the source studies' backend
// tables, CSV and JSON for tools, iperf3-compatible JSON for tcp/udp
// results, and a self-contained HTML page whose charts are SVG written by
// this package (no JavaScript, no network access needed to view it).
//
// It also compares runs: a figure counts as a regression only when it got
// worse beyond the run-to-run spread its repetitions showed, not on any
// difference. Everything here is pure: it reads a Report value and writes
// to an io.Writer; output is deterministic so it can be checked against
// golden files.
package report
