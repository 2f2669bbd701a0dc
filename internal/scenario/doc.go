// Package scenario turns a suite (baseline, cni-compare, ...) into the
// measurements it needs between agents, and the measured results back into
// the suite's rows: each figure the median of the repetitions, with their
// minimum and maximum beside it. It is pure planning and arithmetic: it
// neither sends packets nor talks to the server.
package scenario
