package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/external-ip/external-ip/test/bench/poolrows"
	"github.com/external-ip/external-ip/test/bench/standbyrows"
	"github.com/external-ip/external-ip/test/bench/stats"
)

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// pctOf is the nearest-rank percentile q of f over a series' samples.
func pctOf(s *series, q float64, f func(sample) time.Duration) time.Duration {
	if s == nil || len(s.samples) == 0 {
		return 0
	}
	ds := make([]time.Duration, len(s.samples))
	for i, x := range s.samples {
		ds[i] = f(x)
	}
	slices.Sort(ds)
	return stats.Rank(ds, q)
}

// p is a percentile of a series' wall times.
func p(s *series, q float64) time.Duration {
	return pctOf(s, q, func(x sample) time.Duration { return x.wall })
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func ratio(a, b time.Duration) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

// report prints the regime, the tables, and writes the plot and the raw
// samples.
func (b *bench) report(r *results) error {
	fmt.Println()
	fmt.Println(r.regime())
	fmt.Println()
	fmt.Println(r.latencyTable())
	if note := r.p95Note(); note != "" {
		fmt.Println(note + "\n")
	}
	fmt.Println(r.comparisonTable(b))
	fmt.Println(strings.Join(r.tables, "\n"))
	if err := b.writeOut(r); err != nil {
		return err
	}
	fails := 0
	for _, s := range r.rows {
		fails += s.fails
	}
	if fails > 0 {
		return fmt.Errorf("%d invocations failed (the failures column); their rows are not figures", fails)
	}
	return nil
}

// writeOut writes the plot and the raw samples under -out.
func (b *bench) writeOut(r *results) error {
	if b.opts.out == "" {
		return nil
	}
	if err := os.MkdirAll(b.opts.out, 0o755); err != nil {
		return err
	}
	base := "benchmark"
	if r.phase != "" {
		base += "-" + r.phase
	}
	svgPath, csvPath := filepath.Join(b.opts.out, base+".svg"), filepath.Join(b.opts.out, base+".csv")
	if err := os.WriteFile(svgPath, []byte(r.svg(b.opts.n)), 0o644); err != nil {
		return err
	}
	if err := r.writeCSV(csvPath); err != nil {
		return err
	}
	logf("wrote %s and %s", svgPath, csvPath)
	return nil
}

// fastFloor is the exec floor under which a run is in the fast regime: a
// slower floor (a loaded machine) adds the same wait to every row and
// compresses every ratio toward 1.
const fastFloor = 1500 * time.Microsecond

// regime states the run's exec floor, which every ratio depends on.
func (r *results) regime() string {
	f := r.byName[floorRow]
	if f == nil || len(f.samples) == 0 {
		return "regime: no exec floor measured; ratios cannot be placed"
	}
	kind := "fast (under 1.5 ms)"
	if p(f, 50) >= fastFloor {
		kind = "slow (1.5 ms or more): ratios are compressed toward 1; quote them as a slow run's"
	}
	return fmt.Sprintf("regime: exec floor p50 %s, p95 %s: %s; %s", ms(p(f, 50)), ms(p(f, 95)), kind, rcuRegime())
}

// rcuRegime says how long the kernel's grace periods are, which a DEL's
// destroy work waits for (and, holding the commit lock, a netfilter
// socket's release with it): normal ones last several ms, expedited ones
// far less, and some machines expedite them all.
func rcuRegime() string {
	b, err := os.ReadFile("/sys/kernel/rcu_expedited")
	v := strings.TrimSpace(string(b))
	switch {
	case err != nil:
		return fmt.Sprintf("RCU grace periods unknown (%v)", err)
	case v == "0":
		return "RCU grace periods normal (rcu_expedited 0, the kernel's default)"
	}
	return "RCU grace periods expedited (rcu_expedited " + v + "): the destroy work's waits are shorter than a default kernel's"
}

// latencyTable is the markdown table of every series; x host-local compares
// with host-local's ADD for ADD and exec rows and its DEL for DEL rows.
func (r *results) latencyTable() string {
	var sb strings.Builder
	hlA, hlD := p(r.byName["host-local ADD"], 50), p(r.byName["host-local DEL"], 50)
	sb.WriteString("| scenario | p50 | p95 | p95 / p50 | CPU p50 | faults p50 | x host-local | failures |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.rows {
		ref := map[string]time.Duration{"ADD": hlA, "exec": hlA, "DEL": hlD}[s.verb] // none: "-"
		cpu := pctOf(s, 50, func(x sample) time.Duration { return x.cpu })
		faults := pctOf(s, 50, func(x sample) time.Duration { return time.Duration(x.minflt) })
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %d | %s | %d |\n", s.name,
			ms(p(s, 50)), ms(p(s, 95)), ratio(p(s, 95), p(s, 50)), ms(cpu), int64(faults), ratio(p(s, 50), ref), s.fails)
	}
	return sb.String()
}

// p95Note says, when some rows have so few samples (-quick's 10
// iterations, a few standby rounds), that their p95 is their maximum, and
// the tail goal (p95 <= 1.5 x p50) their maximum over their median.
func (r *results) p95Note() string {
	few, least := 0, stats.P95IsMaxUnder
	for _, s := range r.rows {
		if n := len(s.samples); n > 0 && n < stats.P95IsMaxUnder {
			few, least = few+1, min(least, n)
		}
	}
	if few == 0 {
		return ""
	}
	return fmt.Sprintf("note: %d of %d rows have fewer than %d samples (the fewest %d): their nearest-rank p95 is their largest sample, and the tail figure (p95 <= 1.5 x p50) their largest over their median",
		few, len(r.rows), stats.P95IsMaxUnder, least)
}

// comparison is one figure the goals are stated in: ours against a
// reference row of the same run, as a ratio or as a difference of p50s,
// or a row's own p95 against its p50 (tail).
type comparison struct {
	ours, ref string
	diff      bool
	// paired: the rows ran adjacent (uplinks.go), and the figure is their
	// paired difference rather than the difference of their p50s.
	paired bool
	// cpu: a paired comparison that also states the CPU time's and the
	// faults' paired differences, which a loaded machine's queueing
	// blurs less than the wall time's.
	cpu  bool
	tail bool
	max  bool // a row's own largest sample: a takeover's, of a few rounds
	goal string
}

func (b *bench) comparisons(r *results) []comparison {
	var cs []comparison
	def := b.defaultTraffic()
	for _, fam := range []string{"IPv4", "IPv6"} {
		cs = append(cs, comparison{ours: eipRow("ADD", fam, trafficNone), ref: "host-local ADD", goal: "<= 1.3"})
		cs = append(cs, comparison{ours: eipRow("ADD", fam, trafficBoth), ref: "host-local ADD", goal: "<= 1.3 at a floor under 1.5 ms"})
		cs = append(cs, comparison{ours: eipRow("DEL", fam, trafficBoth), ref: "host-local DEL", goal: "<= 1.5 at a floor under 1.5 ms"})
		cs = append(cs, comparison{ours: eipRow("ADD", fam, trafficBoth), ref: eipRow("ADD", fam, trafficNone), diff: true, goal: "<= +0.5 ms"})
		// Route mode (the default when steered) against hold address.
		for _, verb := range []string{"ADD", "DEL"} {
			cs = append(cs, comparison{ours: eipRow(verb, fam, trafficBoth), ref: eipRow(verb, fam, trafficBothAddress), diff: true, goal: "<= +0.2 ms"})
		}
	}
	cs = append(cs, churnComparisons(def)...)
	cs = append(cs, abComparisons()...)
	cs = append(cs, heldComparisons(r, def)...)
	for _, g := range poolrows.Goals(eipRow("ADD", "IPv4", def), rowBaseline) {
		cs = append(cs, comparison{ours: g.Ours, ref: g.Ref, diff: !g.Paired, paired: g.Paired, cpu: g.Paired, goal: g.Goal})
	}
	for _, g := range standbyrows.Goals(func(fam string) string { return eipRow("ADD", fam, def) }) {
		cs = append(cs, comparison{ours: g.Ours, ref: g.Ref, diff: !g.Max, max: g.Max, goal: g.Goal})
	}
	for _, pm := range []string{"portmap iptables ", "portmap nftables "} {
		for _, verb := range []string{"ADD", "DEL"} {
			cs = append(cs, comparison{ours: eipRow(verb, "IPv4", trafficBoth), ref: pm + verb, goal: "<= 0.25"})
		}
	}
	for _, row := range r.rows {
		if strings.Contains(row.name, ", traffic "+trafficBoth) {
			cs = append(cs, comparison{ours: row.name, ref: row.name, tail: true, goal: "<= 1.5"})
		}
	}
	return cs
}

// heldComparisons hold each row of a held node to the empty node's row
// of its verb and family, and each second-uplink row to its baseline.
func heldComparisons(r *results, def string) []comparison {
	var cs []comparison
	for _, row := range r.rows {
		if row.group != "held" {
			continue
		}
		goal := ""
		if strings.HasSuffix(row.name, " 1000 held") && row.verb == "ADD" {
			goal = "<= +0.5 ms"
		}
		if strings.HasSuffix(row.name, " conntrack entries") && row.verb == "DEL" {
			goal = "<= +1 ms"
		}
		ref := eipRow(row.verb, strings.Fields(row.name)[2][:4], def)
		base, g, paired := uplinkBaseline(row.name)
		if paired {
			ref, goal = base, g
		}
		cs = append(cs, comparison{ours: row.name, ref: ref, diff: true, paired: paired, goal: goal})
	}
	return cs
}

// comparisonTable states each comparison (skipping rows this run lacks)
// with the p50 and p95 of both rows, its figure, the exec floor it was
// measured at, and the goal it is held to; the reader judges.
func (r *results) comparisonTable(b *bench) string {
	var sb strings.Builder
	floor := "-"
	if f := r.byName[floorRow]; f != nil && len(f.samples) > 0 {
		floor = ms(p(f, 50))
	}
	sb.WriteString("| ours | against | ours p50 | ours p95 | theirs p50 | theirs p95 | ratio or difference | exec floor | goal |\n")
	sb.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, c := range b.comparisons(r) {
		o, t := r.byName[c.ours], r.byName[c.ref]
		if o == nil || t == nil || len(o.samples) == 0 || len(t.samples) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c.ours, c.ref,
			ms(p(o, 50)), ms(p(o, 95)), ms(p(t, 50)), ms(p(t, 95)), c.figure(o, t), floor, c.goal)
	}
	return sb.String()
}

// figure is the comparison's ratio or difference.
func (c comparison) figure(o, t *series) string {
	switch {
	case c.tail:
		if len(o.samples) < stats.P95IsMaxUnder {
			return fmt.Sprintf("p95 %s x p50 (the max: under %d samples)", ratio(p(o, 95), p(o, 50)), stats.P95IsMaxUnder)
		}
		return "p95 " + ratio(p(o, 95), p(o, 50)) + " x p50"
	case c.max:
		return "max " + ms(p(o, 100))
	case c.paired:
		if o.rounds != t.rounds {
			return fmt.Sprintf("paired: rows of %d and %d samples per iteration", o.rounds, t.rounds)
		}
		d, lo, hi, ok := pairedDiff(o, t)
		if !ok {
			return "paired: no round has both"
		}
		out := fmt.Sprintf("paired %+.2f ms (95%% CI %+.2f to %+.2f)", msOf(d), msOf(lo), msOf(hi))
		if c.cpu {
			d, lo, hi, _ := pairedDiffOf(o, t, func(x sample) time.Duration { return x.cpu })
			f, flo, fhi, _ := pairedDiffOf(o, t, func(x sample) time.Duration { return time.Duration(x.minflt) })
			out += fmt.Sprintf("; CPU %+.2f ms (%+.2f to %+.2f); faults %+d (%+d to %+d)", msOf(d), msOf(lo), msOf(hi), f, flo, fhi)
		}
		return out
	case c.diff:
		return fmt.Sprintf("%+.2f ms", float64(p(o, 50)-p(t, 50))/1e6)
	}
	return ratio(p(o, 50), p(t, 50)) + " x"
}

// writeCSV writes every recorded sample, one line each.
func (r *results) writeCSV(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"scenario", "verb", "iteration", "wall_us", "cpu_us", "minor_faults"})
	for _, s := range r.rows {
		for _, x := range s.samples {
			w.Write([]string{s.name, s.verb, strconv.Itoa(x.it), strconv.FormatInt(x.wall.Microseconds(), 10),
				strconv.FormatInt(x.cpu.Microseconds(), 10), strconv.FormatInt(x.minflt, 10)})
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

// pairedDiff is the median over rounds of o's wall time less t's in the
// same round (the samples' it), and a 95% percentile-bootstrap interval
// of that median (stats.MedianCI) whose clusters are whole iterations: a
// round's it over the rows' rounds per iteration, which the rows state,
// since an iteration's rounds ran one after another and may share the
// machine's state. Rows run adjacent (uplinks.go) share the machine's
// state, so this difference is far steadier than that of two p50s. ok is
// false when no round has both, or the rows number their rounds
// differently.
func pairedDiff(o, t *series) (med, lo, hi time.Duration, ok bool) {
	return pairedDiffOf(o, t, func(x sample) time.Duration { return x.wall })
}

// pairedDiffOf is pairedDiff of f's measure of each sample (wall time,
// CPU time, faults).
func pairedDiffOf(o, t *series, f func(sample) time.Duration) (med, lo, hi time.Duration, ok bool) {
	rounds := o.rounds
	if rounds < 1 || t.rounds != rounds {
		return 0, 0, 0, false
	}
	byRound := map[int]time.Duration{}
	for _, x := range t.samples {
		byRound[x.it] = f(x)
	}
	byIt := map[int][]time.Duration{}
	for _, x := range o.samples {
		if w, ok := byRound[x.it]; ok {
			byIt[x.it/rounds] = append(byIt[x.it/rounds], f(x)-w)
		}
	}
	if len(byIt) == 0 {
		return 0, 0, 0, false
	}
	med, lo, hi = stats.MedianCI(byIt)
	return med, lo, hi, true
}
