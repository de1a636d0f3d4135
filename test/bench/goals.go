package main

import (
	"fmt"
	"strings"
	"time"
)

type goal struct {
	what, measured string
	ok             bool
}

// goals are issue 6's goals, judged on this run's medians.
func (r *results) goals() []goal {
	gs := r.latencyGoals()
	gs = append(gs, r.heldGoals()...)
	if g, ok := r.concGoal(); ok {
		gs = append(gs, g)
	}
	if c := r.cold; c != nil {
		gs = append(gs, goal{
			fmt.Sprintf("%d concurrent first ADDs on a node without the holder device, no failure", c.k),
			fmt.Sprintf("%d of %d failed over %d bursts", c.fails, c.runs, len(c.walls)),
			c.fails == 0,
		})
	}
	return gs
}

func (r *results) latencyGoals() []goal {
	var gs []goal
	noop, hl := p(r.byName["noop ADD"], 50), p(r.byName["host-local ADD"], 50)
	for _, fam := range []string{"IPv4", "IPv6"} {
		e := p(r.byName["external-ip ADD "+fam], 50)
		gs = append(gs, goal{
			fmt.Sprintf("external-ip ADD %s <= 1.10 x noop ADD (p50)", fam),
			fmt.Sprintf("%s vs %s = %s x", ms(e), ms(noop), ratio(e, noop)),
			float64(e) <= 1.10*float64(noop),
		}, goal{
			fmt.Sprintf("external-ip ADD %s <= 0.95 x host-local ADD (p50)", fam),
			fmt.Sprintf("%s vs %s = %s x", ms(e), ms(hl), ratio(e, hl)),
			float64(e) <= 0.95*float64(hl),
		})
	}
	return gs
}

func (r *results) heldGoals() []goal {
	var gs []goal
	base := p(r.byName["external-ip ADD IPv4"], 50)
	for _, row := range r.heldRows() {
		if !strings.Contains(row.name, "IPv4 held") {
			continue
		}
		e := p(row, 50)
		_, label := heldParts(row)
		gs = append(gs, goal{
			fmt.Sprintf("ADD with %s within 2.5 ms of 0 held (p50)", label),
			fmt.Sprintf("%s vs %s: %+.2f ms", ms(e), ms(base), float64(e-base)/1e6),
			e-base <= 2500*time.Microsecond,
		})
	}
	return gs
}

// concGoal judges K = 2 and up; K = 1 is the control, the same work both
// ways, and counts only for failures.
func (r *results) concGoal() (goal, bool) {
	if len(r.conc) < 2 {
		return goal{}, false
	}
	ok, worst, worstK, fails := true, 0.0, 0, 0
	for _, c := range r.conc {
		fails += c.fails
		ok = ok && c.fails == 0
		if c.k == 1 {
			continue
		}
		if q := concRatio(c); q > worst {
			worst, worstK = q, c.k
		}
		ok = ok && concRatio(c) <= 1
	}
	return goal{
		fmt.Sprintf("K concurrent ADDs no slower in total than K serial, no failure, K = 2..%d", r.conc[len(r.conc)-1].k),
		fmt.Sprintf("worst concurrent/serial %.2f (K=%d), %d failures", worst, worstK, fails),
		ok,
	}, true
}

func concRatio(c concRow) float64 {
	return float64(median(c.concurrent)) / float64(median(c.serial))
}

func passFail(ok bool) string {
	if ok {
		return "**pass**"
	}
	return "**FAIL**"
}

func (r *results) goalTable() string {
	var sb strings.Builder
	sb.WriteString("| goal (issue 6) | measured | result |\n|---|---|---|\n")
	for _, g := range r.goals() {
		fmt.Fprintf(&sb, "| %s | %s | %s |\n", g.what, g.measured, passFail(g.ok))
	}
	return sb.String()
}
