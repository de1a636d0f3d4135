package stats

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Rank is percentile q of sorted, by nearest rank: the least value with
// at least q% of them at or below it. q*n/100 is exact for the q used
// (95, 2.5, 97.5), where q/100*n need not be.
func Rank(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted))/100)) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// P95IsMaxUnder is the samples under which the nearest-rank p95 is the
// largest sample: ceil(0.95 n) is n for every n under 20.
const P95IsMaxUnder = 20

// Median is the middle of ds, the upper of the two for an even count; 0
// for none.
func Median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// MedianCI is the median of every sample of the clusters and its 95%
// percentile-bootstrap interval: the nearest-rank 2.5th and 97.5th
// percentiles of BootstrapMedians.
func MedianCI(clusters map[int][]time.Duration) (med, lo, hi time.Duration) {
	var all []time.Duration
	for _, c := range clusters {
		all = append(all, c...)
	}
	meds := BootstrapMedians(clusters)
	return Median(all), Rank(meds, 2.5), Rank(meds, 97.5)
}

// BootstrapMedians are the medians of 2000 resamples of whole clusters,
// sorted, with a fixed seed (the same samples give the same figures).
// Samples of one cluster may share a state (the machine's, over one
// iteration's rounds): resampling them one by one would count them as
// independent and make the interval too narrow.
func BootstrapMedians(clusters map[int][]time.Duration) []time.Duration {
	keys := slices.Sorted(maps.Keys(clusters))
	rng := rand.New(rand.NewPCG(1, 2))
	meds := make([]time.Duration, 2000)
	for i := range meds {
		var re []time.Duration
		for range keys {
			re = append(re, clusters[keys[rng.IntN(len(keys))]]...)
		}
		meds[i] = Median(re)
	}
	slices.Sort(meds)
	return meds
}
