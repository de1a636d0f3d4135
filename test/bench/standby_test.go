package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/external-ip/external-ip/test/bench/standbyrows"
)

// standbyResults adds the standby rows to filledResults' as the bench
// does (nothing runs): the ADD rows as Pair registers them, with their
// DEL rows, and the takeover rows through the seam's Record, one with a
// failed round.
func standbyResults(t *testing.T) (*bench, *results) {
	t.Helper()
	b, res := filledResults(t)
	seam := standbySeam{poolSeam{b, res}}
	for i, fam := range []string{"IPv4", "IPv6"} {
		for _, row := range []string{standbyrows.RowStandby(fam), standbyrows.RowToday(fam)} {
			add, del := res.add(row, "ADD", "standby"), res.add(strings.Replace(row, "ADD", "DEL", 1), "DEL", "standby")
			for it := range 40 {
				add.samples = append(add.samples, sample{it: it, wall: time.Duration(5+i+it) * time.Millisecond})
				del.samples = append(del.samples, sample{it: it, wall: time.Duration(4+it) * time.Millisecond})
			}
		}
		for j, f := range standbyrows.Faults {
			seam.Record(f.Row(fam), []time.Duration{time.Duration(700+j) * time.Millisecond, 812 * time.Millisecond, 650 * time.Millisecond}, j%2)
		}
	}
	return b, res
}

// Every standby goal is in the comparison table with both rows' p50 and
// p95 and the exec floor: a standby's ADD against today's as a difference,
// each takeover as its largest time.
func TestTheStandbyGoalsArePrintedWithTheirFigures(t *testing.T) {
	b, res := standbyResults(t)
	table := res.comparisonTable(b)
	found := map[string]string{}
	for _, line := range strings.Split(table, "\n")[2:] {
		if c := cells(line); len(c) == 9 {
			found[c[0]+" | "+c[1]] = c[6]
			for _, i := range []int{2, 3, 4, 5, 7} {
				if !msCell.MatchString(c[i]) {
					t.Errorf("cell %d of %q does not parse as a time: %q", i, c[0], c[i])
				}
			}
		}
	}
	diff, max := regexp.MustCompile(`^[+-]\d+\.\d\d ms$`), regexp.MustCompile(`^max \d+\.\d\d ms$`)
	for _, g := range standbyrows.Goals(func(fam string) string { return eipRow("ADD", fam, trafficBoth) }) {
		fig, ok := found[g.Ours+" | "+g.Ref]
		want := diff
		if g.Max {
			want = max
		}
		if !ok || !want.MatchString(fig) {
			t.Errorf("comparison %q against %q: figure %q (printed: %v), want %v:\n%s", g.Ours, g.Ref, fig, ok, want, table)
		}
	}
	if fig := found[standbyrows.Faults[0].Row("IPv4")+" | "+standbyrows.Faults[0].Row("IPv4")]; fig != "max 812.00 ms" {
		t.Errorf("the uplink-down takeover's largest time: %q, want max 812.00 ms", fig)
	}
}

// The takeover rows are in the latency table, with their failed rounds,
// compared with no plugin row (their verb is no plugin's).
func TestTheTakeoverRowsArePrintedWithTheirFailures(t *testing.T) {
	_, res := standbyResults(t)
	rows := 0
	for _, line := range strings.Split(res.latencyTable(), "\n")[2:] {
		c := cells(line)
		if len(c) != 8 || !strings.HasPrefix(c[0], "standby IPv") {
			continue
		}
		rows++
		if !msCell.MatchString(c[1]) || !msCell.MatchString(c[2]) || c[6] != "-" {
			t.Errorf("takeover line: p50 %q, p95 %q, x host-local %q; want times and -: %q", c[1], c[2], c[6], line)
		}
		if want := map[bool]string{true: "1", false: "0"}[strings.Contains(c[0], "namespace deleted")]; c[7] != want {
			t.Errorf("%s: failures %q, want %s", c[0], c[7], want)
		}
	}
	if want := 2 * len(standbyrows.Faults); rows != want {
		t.Errorf("%d takeover rows in the latency table, want %d", rows, want)
	}
}

// The plot leaves the standby rows out: they would flatten every other
// bar.
func TestThePlotLeavesTheStandbyRowsOut(t *testing.T) {
	_, res := standbyResults(t)
	svg := res.svg(40)
	if strings.Contains(svg, "standby") || !strings.Contains(svg, "host-local ADD") {
		t.Errorf("the plot has a standby row, or lacks host-local's")
	}
}
