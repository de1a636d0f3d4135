package main

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Two rows sharing each iteration's slow or fast spell (up to 3 ms, far
// more than their difference) with their own jitter of 0.2 ms: the paired
// difference finds the 0.3 ms between them, where the p50s' difference
// would be off by the spells' draw.
func TestPairedDiffFindsADifferenceUnderSharedNoise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	o, base := &series{}, &series{}
	for it := range 500 {
		spell := time.Duration(rng.IntN(3000)) * time.Microsecond
		jitter := func() time.Duration { return time.Duration(rng.IntN(200)) * time.Microsecond }
		base.samples = append(base.samples, sample{it: it, wall: 10*time.Millisecond + spell + jitter()})
		o.samples = append(o.samples, sample{it: it, wall: 10*time.Millisecond + 300*time.Microsecond + spell + jitter()})
	}
	d, lo, hi := pairedDiff(o, base)
	if d < 250*time.Microsecond || d > 350*time.Microsecond {
		t.Errorf("paired difference %v, want 0.3 ms within 0.05", d)
	}
	if lo > d || hi < d || hi-lo > 100*time.Microsecond || lo > 300*time.Microsecond || hi < 300*time.Microsecond {
		t.Errorf("95%% interval %v to %v: want it around %v, holding 0.3 ms, narrower than 0.1 ms", lo, hi, d)
	}
}

// Only iterations both rows have are paired: a failed invocation leaves
// its iteration out of one row, not the other's sample at another's place.
func TestPairedDiffPairsByIteration(t *testing.T) {
	o := &series{samples: []sample{{it: 0, wall: 5 * time.Millisecond}, {it: 2, wall: 9 * time.Millisecond}}}
	base := &series{samples: []sample{{it: 1, wall: time.Millisecond}, {it: 2, wall: 8 * time.Millisecond}}}
	if d, lo, hi := pairedDiff(o, base); d != time.Millisecond || lo != d || hi != d {
		t.Errorf("pairedDiff = %v (%v to %v), want 1ms from iteration 2 alone", d, lo, hi)
	}
}

// adjacent runs uplink-rounds rounds per iteration, alternating which of
// the two goes first, and a warm-up iteration once.
func TestAdjacentAlternatesTheOrderOverRounds(t *testing.T) {
	b := &bench{opts: options{uplinkRounds: 3}}
	var got []int
	u := b.adjacent(func(it int) { got = append(got, -100-it) }, func(it int) { got = append(got, it) })
	u(-1)
	u(1)
	want := []int{-99, -1, 3, -103, -104, 4, 5, -105} // rounds 3, 4, 5: odd ones the row first
	if len(got) != len(want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ran %v, want %v", got, want)
		}
	}
}
