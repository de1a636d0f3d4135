package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Two rows sharing each round's slow or fast spell (up to 3 ms, ten times
// their difference) with jitter of their own of 0.2 ms: the paired
// difference finds the 0.3 ms between them within 0.05 ms, and its
// interval holds it and is under 0.1 ms wide, where one row's samples
// spread over 3 ms.
func TestPairedDiffFindsADifferenceUnderSharedNoise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	o, base := &series{}, &series{}
	for it := range 500 {
		spell := time.Duration(rng.IntN(3000)) * time.Microsecond
		jitter := func() time.Duration { return time.Duration(rng.IntN(200)) * time.Microsecond }
		base.samples = append(base.samples, sample{it: it, wall: 10*time.Millisecond + spell + jitter()})
		o.samples = append(o.samples, sample{it: it, wall: 10*time.Millisecond + 300*time.Microsecond + spell + jitter()})
	}
	d, lo, hi, ok := pairedDiff(o, base, 5)
	if !ok || d < 250*time.Microsecond || d > 350*time.Microsecond {
		t.Errorf("paired difference %v, want 0.3 ms within 0.05", d)
	}
	if lo > d || hi < d || hi-lo > 100*time.Microsecond || lo > 300*time.Microsecond || hi < 300*time.Microsecond {
		t.Errorf("95%% interval %v to %v: want it around %v, holding 0.3 ms, narrower than 0.1 ms", lo, hi, d)
	}
}

// Only rounds both rows have are paired: a failed invocation leaves its
// round out of one row, not the other's sample at another's place; rows
// with no round in common give no figure.
func TestPairedDiffPairsByRound(t *testing.T) {
	o := &series{samples: []sample{{it: 0, wall: 5 * time.Millisecond}, {it: 2, wall: 9 * time.Millisecond}}}
	base := &series{samples: []sample{{it: 1, wall: time.Millisecond}, {it: 2, wall: 8 * time.Millisecond}}}
	if d, lo, hi, ok := pairedDiff(o, base, 5); !ok || d != time.Millisecond || lo != d || hi != d {
		t.Errorf("pairedDiff = %v (%v to %v, %v), want 1ms from round 2 alone", d, lo, hi, ok)
	}
	if _, _, _, ok := pairedDiff(o, &series{samples: []sample{{it: 1, wall: time.Millisecond}}}, 5); ok {
		t.Errorf("pairedDiff of rows with no round in common gave a figure")
	}
}

// adjacent runs -uplink-rounds rounds per iteration, numbered on from the
// iteration's first, and a warm-up iteration once; over two iterations
// each of the two goes first as often, with an odd number of rounds and
// with an even one.
func TestAdjacentAlternatesTheOrderOverRounds(t *testing.T) {
	for _, c := range []struct {
		rounds int
		want   []int // the row's rounds, the baseline's as -100-round
	}{
		{3, []int{-99, -1, -100, 0, 1, -101, -102, 2, 3, -103, -104, 4, 5, -105}},
		{2, []int{-99, -1, -100, 0, 1, -101, 2, -102, -103, 3}},
	} {
		b := &bench{opts: options{uplinkRounds: c.rounds}}
		var got []int
		u := b.adjacent(func(it int) { got = append(got, -100-it) }, func(it int) { got = append(got, it) })
		u(-1)
		u(0)
		u(1)
		if !slices.Equal(got, c.want) {
			t.Errorf("%d rounds: ran %v, want %v", c.rounds, got, c.want)
		}
	}
}
