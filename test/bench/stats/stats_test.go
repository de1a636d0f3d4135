package stats

import (
	"testing"
	"time"
)

// upTo is 1..n microseconds, sorted.
func upTo(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * time.Microsecond
	}
	return out
}

// Rank is the nearest rank: of 2000 values the 2.5th percentile is the
// 50th (index 49) and the 97.5th the 1950th; the p95 of fewer than
// P95IsMaxUnder values is their largest, and of that many it is not.
func TestRankIsTheNearestRank(t *testing.T) {
	for _, c := range []struct {
		n    int
		q    float64
		want time.Duration
	}{
		{2000, 2.5, 50 * time.Microsecond},
		{2000, 97.5, 1950 * time.Microsecond},
		{10, 50, 5 * time.Microsecond},
		{P95IsMaxUnder - 1, 95, (P95IsMaxUnder - 1) * time.Microsecond},
		{P95IsMaxUnder, 95, (P95IsMaxUnder - 1) * time.Microsecond},
		{200, 95, 190 * time.Microsecond},
		{1, 95, time.Microsecond},
	} {
		if got := Rank(upTo(c.n), c.q); got != c.want {
			t.Errorf("percentile %v of 1..%d µs: %v, want %v", c.q, c.n, got, c.want)
		}
	}
}

// Median is the upper middle of an even count, whatever the order, and 0
// of nothing; it leaves its argument as it was.
func TestMedianIsTheUpperMiddle(t *testing.T) {
	ds := []time.Duration{4, 1, 3, 2}
	if got := Median(ds); got != 3 || ds[0] != 4 {
		t.Errorf("Median(4 1 3 2) = %v (argument now %v), want 3 and the argument unsorted", got, ds)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median(nil) = %v, want 0", got)
	}
}

// MedianCI's median is of every sample, and one cluster's interval is
// its own median (every resample is that cluster).
func TestMedianCIOfOneClusterIsItsMedian(t *testing.T) {
	med, lo, hi := MedianCI(map[int][]time.Duration{7: {5, 1, 9}})
	if med != 5 || lo != 5 || hi != 5 {
		t.Errorf("MedianCI of one cluster {5 1 9} = %v (%v to %v), want 5 (5 to 5)", med, lo, hi)
	}
}
