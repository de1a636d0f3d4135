package main

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/test/bench/poolrows"
	"github.com/external-ip/external-ip/test/bench/stats"
)

// Two rows sharing each round's slow or fast spell (up to 3 ms, ten times
// their difference) with jitter of their own of 0.2 ms: the paired
// difference finds the 0.3 ms between them within 0.05 ms, and its
// interval holds it and is under 0.1 ms wide, where one row's samples
// spread over 3 ms.
func TestPairedDiffFindsADifferenceUnderSharedNoise(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	o, base := &series{rounds: 5}, &series{rounds: 5}
	for it := range 500 {
		spell := time.Duration(rng.IntN(3000)) * time.Microsecond
		jitter := func() time.Duration { return time.Duration(rng.IntN(200)) * time.Microsecond }
		base.samples = append(base.samples, sample{it: it, wall: 10*time.Millisecond + spell + jitter()})
		o.samples = append(o.samples, sample{it: it, wall: 10*time.Millisecond + 300*time.Microsecond + spell + jitter()})
	}
	d, lo, hi, ok := pairedDiff(o, base)
	if !ok || d < 250*time.Microsecond || d > 350*time.Microsecond {
		t.Errorf("paired difference %v, want 0.3 ms within 0.05", d)
	}
	if lo > d || hi < d || hi-lo > 100*time.Microsecond || lo > 300*time.Microsecond || hi < 300*time.Microsecond {
		t.Errorf("95%% interval %v to %v: want it around %v, holding 0.3 ms, narrower than 0.1 ms", lo, hi, d)
	}
}

// Only rounds both rows have are paired: a failed invocation leaves its
// round out of one row, not the other's sample at another's place; rows
// with no round in common give no figure, nor do rows that number their
// rounds differently (their rounds are not each other's).
func TestPairedDiffPairsByRound(t *testing.T) {
	o := &series{rounds: 1, samples: []sample{{it: 0, wall: 5 * time.Millisecond}, {it: 2, wall: 9 * time.Millisecond}}}
	base := &series{rounds: 1, samples: []sample{{it: 1, wall: time.Millisecond}, {it: 2, wall: 8 * time.Millisecond}}}
	if d, lo, hi, ok := pairedDiff(o, base); !ok || d != time.Millisecond || lo != d || hi != d {
		t.Errorf("pairedDiff = %v (%v to %v, %v), want 1ms from round 2 alone", d, lo, hi, ok)
	}
	if _, _, _, ok := pairedDiff(o, &series{rounds: 1, samples: []sample{{it: 1, wall: time.Millisecond}}}); ok {
		t.Errorf("pairedDiff of rows with no round in common gave a figure")
	}
	if _, _, _, ok := pairedDiff(o, &series{rounds: 5, samples: base.samples}); ok {
		t.Errorf("pairedDiff of a row of 1 sample per iteration against one of 5 gave a figure")
	}
	c := comparison{paired: true}
	if got := c.figure(o, &series{rounds: 5, samples: base.samples}); got != "paired: rows of 1 and 5 samples per iteration" {
		t.Errorf("figure of rows of 1 and 5 samples per iteration: %q, want it to say so", got)
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
		u := b.adjacent(timed{run: func(it int) { got = append(got, -100-it) }}, timed{run: func(it int) { got = append(got, it) }})
		u(-1)
		u(0)
		u(1)
		if !slices.Equal(got, c.want) {
			t.Errorf("%d rounds: ran %v, want %v", c.rounds, got, c.want)
		}
	}
}

var pairedCell = regexp.MustCompile(`^paired [+-]\d+\.\d\d ms \(95% CI ([+-]\d+\.\d\d) to ([+-]\d+\.\d\d)\)`)

// pairedCI is the 95% interval, in ms, of the comparison table's paired
// figure of row ours against ref.
func pairedCI(t *testing.T, table, ours, ref string) (lo, hi float64) {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		c := cells(line)
		if len(c) != 9 || c[0] != ours || c[1] != ref || !strings.HasPrefix(c[6], "paired") {
			continue
		}
		m := pairedCell.FindStringSubmatch(c[6])
		if m == nil {
			t.Fatalf("paired figure of %q against %q does not parse: %q", ours, ref, c[6])
		}
		lo, _ = strconv.ParseFloat(m[1], 64)
		hi, _ = strconv.ParseFloat(m[2], 64)
		return lo, hi
	}
	t.Fatalf("no paired figure of %q against %q in the comparison table:\n%s", ours, ref, table)
	return 0, 0
}

// Rows that take one sample per iteration (the pool rows against the
// explicit IP's, which is held against the build before pools the same
// way) are paired by iteration, and each iteration is a cluster of the
// bootstrap: at -n 10, with no true difference, the table's 95% interval
// holds 0 in most runs. Resampled in blocks of -uplink-rounds iterations,
// as the uplink rows are, ten iterations were two clusters and the
// interval held 0 in about half the runs.
func TestThePairedIntervalOfRowsOfOneSamplePerIterationHoldsNoDifference(t *testing.T) {
	b := &bench{opts: options{n: 10, churnRounds: 5, uplinkRounds: 5}, bins: map[string]string{}, trafficKey: true, root: t.TempDir()}
	res := &results{byName: map[string]*series{}}
	n := &node{name: "n"}
	today := eipRow("ADD", "IPv4", b.defaultTraffic())
	b.eipPair(res, today, "external-ip", n, "external-ip", 1, false, b.defaultTraffic())
	if err := poolUnits(b, res, n); err != nil {
		t.Fatal(err)
	}
	ours, ref := res.byName[poolrows.RowLocalPool], res.byName[today]
	const seeds = 200
	held := 0
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 3))
		ms := func(v float64) time.Duration { return time.Duration(v * 1e6) }
		ours.samples, ref.samples = nil, nil
		for it := range b.opts.n {
			// Each iteration's spell (the machine's state) falls on both
			// rows; each invocation adds jitter of its own.
			spell := ms(3 * rng.Float64())
			ours.record(sample{wall: 10*time.Millisecond + spell + ms(rng.NormFloat64())}, it)
			ref.record(sample{wall: 10*time.Millisecond + spell + ms(rng.NormFloat64())}, it)
		}
		if lo, hi := pairedCI(t, res.comparisonTable(b), ours.name, ref.name); lo <= 0 && hi >= 0 {
			held++
		}
	}
	if held < seeds*85/100 {
		t.Errorf("the paired 95%% interval held the true difference 0 in %d of %d runs of 10 iterations, want 85%% at the least", held, seeds)
	}
}

// The rows of units run adjacent take -uplink-rounds samples per
// iteration, and pairedDiff (given only the rows, as the table calls it)
// resamples their iterations whole: when each iteration's rounds share a
// difference of their own (the machine's state they ran in), ten
// iterations' interval holds the true difference in most runs, where
// fifty rounds taken as independent would be far too narrow.
func TestThePairedIntervalOfAdjacentRowsResamplesWholeIterations(t *testing.T) {
	const seeds = 200
	held := 0
	for seed := range seeds {
		b := &bench{opts: options{n: 10, uplinkRounds: 5}}
		res := &results{byName: map[string]*series{}}
		base, row := res.add("base", "ADD", "held"), res.add("row", "ADD", "held")
		rng := rand.New(rand.NewPCG(uint64(seed), 5))
		ms := func(v float64) time.Duration { return time.Duration(v * 1e6) }
		var shared time.Duration // this iteration's difference
		u := b.adjacent(
			timed{rows: []*series{base}, run: func(r int) { base.record(sample{wall: 10 * time.Millisecond}, r) }},
			timed{rows: []*series{row}, run: func(r int) {
				row.record(sample{wall: 10*time.Millisecond + shared + ms(0.1*rng.NormFloat64())}, r)
			}})
		for it := range b.opts.n {
			shared = ms(rng.NormFloat64())
			u(it)
		}
		if len(row.samples) != 50 || row.rounds != 5 || base.rounds != 5 {
			t.Fatalf("row of %d samples, rounds %d and %d: want 50, 5 per iteration", len(row.samples), row.rounds, base.rounds)
		}
		if _, lo, hi, ok := pairedDiff(row, base); ok && lo <= 0 && hi >= 0 {
			held++
		}
	}
	if held < seeds*85/100 {
		t.Errorf("the paired 95%% interval held the true difference 0 in %d of %d runs of 10 iterations, want 85%% at the least", held, seeds)
	}
}

// The interval's bounds are the nearest-rank 2.5th and 97.5th percentiles
// of the 2000 bootstrap medians, as every percentile the bench prints:
// the 50th and the 1950th of them (indices 49 and 1949), not the 51st and
// 1951st.
func TestThePairedIntervalIsTheNearestRankOfTheBootstrapMedians(t *testing.T) {
	// 20 iterations of 25 rounds, each iteration's differences about an
	// offset of its own: the bootstrap medians then spread over enough
	// distinct values that the ranks differ (with this seed).
	rng := rand.New(rand.NewPCG(10, 11))
	o, base := &series{rounds: 25}, &series{rounds: 25}
	byIt := map[int][]time.Duration{}
	for it := range 20 {
		off := time.Duration(rng.IntN(1_000_000))
		for k := range 25 {
			d := off + time.Duration(rng.IntN(1_000_000))
			base.samples = append(base.samples, sample{it: it*25 + k, wall: 10 * time.Millisecond})
			o.samples = append(o.samples, sample{it: it*25 + k, wall: 10*time.Millisecond + d})
			byIt[it] = append(byIt[it], d)
		}
	}
	meds := stats.BootstrapMedians(byIt)
	if len(meds) != 2000 || meds[49] == meds[50] || meds[1949] == meds[1950] {
		t.Fatalf("%d bootstrap medians, the 49th and 50th %v and %v, the 1949th and 1950th %v and %v: the data do not tell the ranks apart",
			len(meds), meds[49], meds[50], meds[1949], meds[1950])
	}
	if _, lo, hi, _ := pairedDiff(o, base); lo != meds[49] || hi != meds[1949] {
		t.Errorf("interval %v to %v, want the nearest ranks %v to %v (not %v to %v)", lo, hi, meds[49], meds[1949], meds[50], meds[1950])
	}
}

// Under 20 samples a row's nearest-rank p95 is its largest, and the table
// says so: a note beside the tables, and the tail figure (p95 against
// p50) marked as the max; from 20 samples on, p95 is a sample below the
// largest and neither appears.
func TestAFewSamplesP95IsNotedAsTheirMaximum(t *testing.T) {
	for _, n := range []int{10, 19, 20, 40} {
		b := &bench{opts: options{churnRounds: 5, uplinkRounds: 5}, bins: map[string]string{}, trafficKey: true}
		res := &results{byName: map[string]*series{}}
		b.eipPair(res, eipRow("ADD", "IPv4", trafficBoth), "external-ip", &node{name: "n"}, "external-ip", 1, false, trafficBoth)
		s := res.rows[0]
		for it := range n {
			s.record(sample{wall: time.Duration(1000+it) * time.Microsecond}, it)
		}
		isMax := p(s, 95) == p(s, 100)
		note := res.p95Note()
		var tail string
		for _, line := range strings.Split(res.comparisonTable(b), "\n") {
			if c := cells(line); len(c) == 9 && c[0] == s.name && c[1] == s.name {
				tail = c[6]
			}
		}
		marked := strings.HasSuffix(tail, "(the max: under 20 samples)")
		if few := n < stats.P95IsMaxUnder; isMax != few || (note != "") != few || marked != few {
			t.Errorf("%d samples: p95 is the max %v, note %q, tail figure %q; want each %v", n, isMax, note, tail, few)
		}
		if n < stats.P95IsMaxUnder && !strings.Contains(note, fmt.Sprintf("1 of 2 rows have fewer than 20 samples (the fewest %d)", n)) {
			t.Errorf("%d samples: note %q does not count the row, the threshold and the fewest samples", n, note)
		}
	}
}
