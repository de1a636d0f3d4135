// Package stats is the bench's arithmetic on samples: nearest-rank
// percentiles, medians, and the percentile-bootstrap interval of a
// median whose samples come in clusters (the rounds of one iteration).
//
// It is pure: durations in, durations out. What a cluster is, which
// samples are paired and how figures are printed are the bench's.
package stats
