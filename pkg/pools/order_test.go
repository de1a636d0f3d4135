package pools

import (
	"math/rand/v2"
	"testing"
)

// A pool of 2,046 IPs whose first 1,000 are claimed: the first free IP is
// found within a few cache lookups on average over many random starts, not
// after a walk through the claimed block (about 245 on average).
func TestAFreeIPIsFoundInFewLookupsWhenTheClaimsLieInOneBlock(t *testing.T) {
	const size, claimed, starts = 2046, 1000, 500
	lookups := 0
	for seed := range uint64(starts) {
		rng := rand.New(rand.NewPCG(seed, seed))
		for i := range FreeIndexes(size, rng.Uint64N, func(i uint64) bool { lookups++; return i < claimed }) {
			if i < claimed {
				t.Fatalf("seed %d: yielded claimed index %d", seed, i)
			}
			break
		}
	}
	if mean := float64(lookups) / starts; mean > 4 {
		t.Errorf("%.1f lookups on average before the first free IP, want at most 4 (half the pool is free)", mean)
	}
}

// Every free index is yielded once, whichever random places were tried:
// the last free IP of a pool is found, and a full pool yields none.
func TestEveryFreeIndexIsYieldedOnce(t *testing.T) {
	for _, c := range []struct {
		size uint64
		free map[uint64]bool
	}{
		{50, map[uint64]bool{37: true}},
		{20, func() map[uint64]bool {
			m := map[uint64]bool{}
			for i := range uint64(20) {
				m[i] = true
			}
			return m
		}()},
		{30, map[uint64]bool{}},
	} {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, 1))
			seen := map[uint64]int{}
			for i := range FreeIndexes(c.size, rng.Uint64N, func(i uint64) bool { return !c.free[i] }) {
				seen[i]++
			}
			if len(seen) != len(c.free) {
				t.Errorf("size %d, seed %d: yielded %v, want each of %v", c.size, seed, seen, c.free)
			}
			for i, n := range seen {
				if !c.free[i] || n != 1 {
					t.Errorf("size %d, seed %d: index %d yielded %d times (free: %v)", c.size, seed, i, n, c.free[i])
				}
			}
		}
	}
}
