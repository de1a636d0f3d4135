package main

import (
	"encoding/csv"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
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
	i := int(math.Ceil(q/100*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
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

// report prints the tables and writes the plot and the raw samples.
func (b *bench) report(r *results) error {
	fmt.Println()
	fmt.Println(r.latencyTable())
	fmt.Println(r.comparisonTable(b))
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
	svgPath, csvPath := filepath.Join(b.opts.out, "benchmark.svg"), filepath.Join(b.opts.out, "benchmark.csv")
	if err := os.WriteFile(svgPath, []byte(r.svg(b.opts.n)), 0o644); err != nil {
		return err
	}
	if err := r.writeCSV(csvPath); err != nil {
		return err
	}
	logf("wrote %s and %s", svgPath, csvPath)
	return nil
}

// latencyTable is the markdown table of every series; x host-local compares
// with host-local's ADD for ADD and exec rows and its DEL for DEL rows.
func (r *results) latencyTable() string {
	var sb strings.Builder
	hlA, hlD := p(r.byName["host-local ADD"], 50), p(r.byName["host-local DEL"], 50)
	sb.WriteString("| scenario | p50 | p95 | CPU p50 | faults p50 | x host-local | failures |\n")
	sb.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range r.rows {
		ref := hlA
		if s.verb == "DEL" {
			ref = hlD
		}
		cpu := pctOf(s, 50, func(x sample) time.Duration { return x.cpu })
		faults := pctOf(s, 50, func(x sample) time.Duration { return time.Duration(x.minflt) })
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %d | %s | %d |\n", s.name,
			ms(p(s, 50)), ms(p(s, 95)), ms(cpu), int64(faults), ratio(p(s, 50), ref), s.fails)
	}
	return sb.String()
}

// comparison is one figure the goals are stated in: ours against a
// reference row of the same run, as a ratio or as a difference of p50s.
type comparison struct {
	ours, ref string
	diff      bool
	// paired: the rows ran adjacent (uplinks.go), and the figure is their
	// paired difference rather than the difference of their p50s.
	paired bool
	goal   string
}

func (b *bench) comparisons(r *results) []comparison {
	var cs []comparison
	for _, fam := range []string{"IPv4", "IPv6"} {
		cs = append(cs, comparison{eipRow("ADD", fam, trafficNone), "host-local ADD", false, false, "<= 1.3"})
		cs = append(cs, comparison{eipRow("ADD", fam, trafficBoth), "host-local ADD", false, false, "<= 1.3 (unsteered), <= 1.2"})
		cs = append(cs, comparison{eipRow("DEL", fam, trafficBoth), "host-local DEL", false, false, "<= 1.5"})
		cs = append(cs, comparison{eipRow("ADD", fam, trafficBoth), eipRow("ADD", fam, trafficNone), true, false, "<= +0.5 ms"})
		// Route mode (the default when steered) against hold address.
		for _, verb := range []string{"ADD", "DEL"} {
			cs = append(cs, comparison{eipRow(verb, fam, trafficBoth), eipRow(verb, fam, trafficBothAddress), true, false, "<= +0.2 ms"})
		}
	}
	for _, row := range r.rows {
		if goal := ""; row.group == "held" {
			if strings.HasSuffix(row.name, " 1000 held") && row.verb == "ADD" {
				goal = "<= +0.5 ms"
			}
			if strings.HasSuffix(row.name, " conntrack entries") && row.verb == "DEL" {
				goal = "<= +1 ms"
			}
			ref := eipRow(row.verb, strings.Fields(row.name)[2][:4], b.defaultTraffic())
			base, g, paired := uplinkBaseline(row.name)
			if paired {
				ref, goal = base, g
			}
			cs = append(cs, comparison{row.name, ref, true, paired, goal})
		}
	}
	for _, pm := range []string{"portmap iptables ", "portmap nftables "} {
		for _, verb := range []string{"ADD", "DEL"} {
			cs = append(cs, comparison{eipRow(verb, "IPv4", trafficBoth), pm + verb, false, false, "<= 0.25"})
		}
	}
	return cs
}

// comparisonTable states each comparison (skipping rows this run lacks)
// with its figures and the goal it is held to; the reader judges.
func (r *results) comparisonTable(b *bench) string {
	var sb strings.Builder
	sb.WriteString("| ours | against | ours p50 | theirs p50 | ratio or difference | goal |\n|---|---|---:|---:|---:|---|\n")
	for _, c := range b.comparisons(r) {
		o, t := r.byName[c.ours], r.byName[c.ref]
		if o == nil || t == nil {
			continue
		}
		v := ratio(p(o, 50), p(t, 50)) + " x"
		if c.diff {
			v = fmt.Sprintf("%+.2f ms", float64(p(o, 50)-p(t, 50))/1e6)
		}
		if c.paired {
			v = "paired: no round has both"
			if d, lo, hi, ok := pairedDiff(o, t, b.opts.uplinkRounds); ok {
				v = fmt.Sprintf("paired %+.2f ms (95%% CI %+.2f to %+.2f)", msOf(d), msOf(lo), msOf(hi))
			}
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s |\n", c.ours, c.ref, ms(p(o, 50)), ms(p(t, 50)), v, c.goal)
	}
	return sb.String()
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
// of that median: 2000 resamples of whole iterations (a round's it over
// rounds), whose rounds ran one after another and may share the
// machine's state, with a fixed seed (the same samples give the same
// figures). Rows run adjacent (uplinks.go) share the machine's state, so
// this difference is far steadier than that of two p50s. ok is false
// when no round has both.
func pairedDiff(o, t *series, rounds int) (med, lo, hi time.Duration, ok bool) {
	byRound := map[int]time.Duration{}
	for _, x := range t.samples {
		byRound[x.it] = x.wall
	}
	byIt := map[int][]time.Duration{}
	var ds []time.Duration
	for _, x := range o.samples {
		if w, ok := byRound[x.it]; ok {
			byIt[x.it/rounds] = append(byIt[x.it/rounds], x.wall-w)
			ds = append(ds, x.wall-w)
		}
	}
	if len(ds) == 0 {
		return 0, 0, 0, false
	}
	its := slices.Sorted(maps.Keys(byIt))
	rng := rand.New(rand.NewPCG(1, 2))
	meds := make([]time.Duration, 2000)
	for i := range meds {
		var re []time.Duration
		for range its {
			re = append(re, byIt[its[rng.IntN(len(its))]]...)
		}
		meds[i] = median(re)
	}
	slices.Sort(meds)
	return median(ds), meds[len(meds)*25/1000], meds[len(meds)*975/1000], true
}
