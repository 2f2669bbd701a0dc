// Package stats holds the pure statistics cnperf's probes report: exact
// summaries and percentiles, an HDR-histogram recorder for long runs, RFC
// 3550 interarrival jitter, loss/reordering/duplicate accounting of sequence
// numbers, and fixed-width histogram bins. Nothing here does I/O, and nothing
// is safe for concurrent use unless it says so.
package stats
