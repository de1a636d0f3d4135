package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// filledResults registers the rows of the empty node and of both churn
// nodes as the bench does (nothing runs), and gives every row samples.
func filledResults(t *testing.T) (*bench, *results) {
	t.Helper()
	b := &bench{opts: options{churnRounds: 5, uplinkRounds: 5}, bins: map[string]string{}, trafficKey: true}
	res := &results{byName: map[string]*series{}}
	n := &node{name: "n"}
	b.referenceUnits(res, n, n)
	b.eipUnits(res, n, n)
	c := &churn{b: b, n: n, cycle: cycle{n: n}}
	c.units(res)
	c.cycleUnits(res)
	for i, s := range res.rows {
		for it := range 40 {
			s.samples = append(s.samples, sample{it: it, wall: time.Duration(1000+10*i+it*50) * time.Microsecond})
		}
	}
	return b, res
}

var msCell = regexp.MustCompile(`^\d+\.\d\d ms$`)

// cells splits a markdown table line into its cells.
func cells(line string) []string {
	fs := strings.Split(strings.Trim(line, "|"), "|")
	for i := range fs {
		fs[i] = strings.TrimSpace(fs[i])
	}
	return fs
}

// The churn rows (back to back, steered and not, and the cycling node)
// are in the latency table with a p50, a p95 and their ratio that parse.
func TestTheChurnRowsArePrintedWithP50AndP95(t *testing.T) {
	_, res := filledResults(t)
	table := res.latencyTable()
	want := []string{churnRow("ADD", trafficBoth), churnRow("DEL", trafficBoth), churnRow("ADD", trafficNone),
		churnRow("DEL", trafficNone), cycleRow("ADD", trafficBoth), cycleRow("DEL", trafficBoth)}
	found := map[string]bool{}
	for _, line := range strings.Split(table, "\n")[2:] {
		if line == "" {
			continue
		}
		c := cells(line)
		if len(c) != 8 || !msCell.MatchString(c[1]) || !msCell.MatchString(c[2]) {
			t.Errorf("latency line does not parse as name, p50, p95, ...: %q", line)
			continue
		}
		if _, err := strconv.ParseFloat(c[3], 64); err != nil {
			t.Errorf("p95 / p50 of %q: %q is no number", c[0], c[3])
		}
		found[c[0]] = true
	}
	for _, w := range want {
		if !found[w] {
			t.Errorf("no row %q in the latency table:\n%s", w, table)
		}
	}
}

// Every comparison states both rows' p50 and p95 and the exec floor it
// was measured at; the churn goal (steered against unsteered, back to
// back) and the steered rows' tails are among them.
func TestEveryComparisonStatesP95AndTheExecFloor(t *testing.T) {
	b, res := filledResults(t)
	table := res.comparisonTable(b)
	var churnGoal, churnPaired, tail bool
	for _, line := range strings.Split(table, "\n")[2:] {
		if line == "" {
			continue
		}
		c := cells(line)
		if len(c) != 9 {
			t.Fatalf("comparison line has %d cells, want 9: %q", len(c), line)
		}
		for _, i := range []int{2, 3, 4, 5, 7} {
			if !msCell.MatchString(c[i]) {
				t.Errorf("cell %d of %q does not parse as a time: %q", i, c[0], c[i])
			}
		}
		churnGoal = churnGoal || c[0] == churnRow("ADD", trafficBoth) && c[1] == churnRow("ADD", trafficNone) && strings.HasSuffix(c[6], " ms")
		churnPaired = churnPaired || c[0] == churnRow("ADD", trafficBoth) && c[1] == churnRow("ADD", trafficNone) &&
			strings.HasPrefix(c[6], "paired ") && strings.Contains(c[6], "; CPU ")
		tail = tail || c[0] == churnRow("ADD", trafficBoth) && c[1] == c[0] && strings.HasPrefix(c[6], "p95 ")
	}
	if !churnGoal || !churnPaired || !tail {
		t.Errorf("churn comparison found %v, paired with its CPU %v, its tail %v:\n%s", churnGoal, churnPaired, tail, table)
	}
	if r := res.regime(); !regexp.MustCompile(`^regime: exec floor p50 \d+\.\d\d ms, p95 \d+\.\d\d ms: (fast|slow) `).MatchString(r) {
		t.Errorf("regime line does not parse: %q", r)
	}
}

// A run whose floor is 1.5 ms or more says it is slow.
func TestTheRegimeSaysSlowAtAFloorOf1point5ms(t *testing.T) {
	res := &results{byName: map[string]*series{}}
	f := res.add(floorRow, "exec", "reference")
	f.samples = []sample{{wall: 1500 * time.Microsecond}}
	if r := res.regime(); !strings.Contains(r, ": slow") {
		t.Errorf("regime at a 1.5 ms floor: %q", r)
	}
	f.samples[0].wall = 1400 * time.Microsecond
	if r := res.regime(); !strings.Contains(r, ": fast") {
		t.Errorf("regime at a 1.4 ms floor: %q", r)
	}
}

// An A/B comparison states B against A paired, in wall time, CPU time
// and faults, each with its interval.
func TestAnABComparisonStatesWallCPUAndFaultsPaired(t *testing.T) {
	b, res := filledResults(t)
	for _, build := range []string{abA, abB} {
		s := res.add(abRow("DEL", "", build), "DEL", "ab")
		for it := range 20 {
			extra := time.Duration(0)
			if build == abB {
				extra = time.Millisecond
			}
			s.samples = append(s.samples, sample{it: it, wall: 5*time.Millisecond + extra, cpu: 4*time.Millisecond + extra, minflt: 400 + int64(extra/time.Millisecond)*20})
		}
	}
	table := res.comparisonTable(b)
	want := "paired +1.00 ms (95% CI +1.00 to +1.00); CPU +1.00 ms (+1.00 to +1.00); faults +20 (+20 to +20)"
	if !strings.Contains(table, want) {
		t.Errorf("no %q in:\n%s", want, table)
	}
}

// The churn rows take -churn-rounds samples per iteration, numbered as
// their units number them (round): the paired figure resamples
// iterations whole.
func TestTheChurnRowsTakeTheirRoundsPerIteration(t *testing.T) {
	b, res := filledResults(t)
	c := &churn{b: b}
	for _, name := range []string{churnRow("ADD", trafficBoth), churnRow("DEL", trafficNone), cycleRow("ADD", trafficBoth)} {
		s := res.byName[name]
		if s.rounds != b.opts.churnRounds {
			t.Errorf("%s: %d samples per iteration, want -churn-rounds' %d", name, s.rounds, b.opts.churnRounds)
		}
		for r := range b.opts.churnRounds {
			if got := c.round(3, r) / s.rounds; got != 3 {
				t.Errorf("%s: round %d of iteration 3 is numbered %d, in iteration %d", name, r, c.round(3, r), got)
			}
		}
	}
}
