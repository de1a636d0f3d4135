package main

import "fmt"

// A/B: with -ab DIR, the plugin built from DIR (B) against this tree's
// build (A), paired: what one change to the plugin (a trick taken out, a
// design tried) costs end to end, in the same run, under the same noise.
// On a node of their own with a second uplink and an IP held there, each
// build's ADD/DEL pair of an IP on the default route's uplink and of
// another IP on the second uplink runs adjacent to the other build's
// (adjacent: the order alternates), so that every ADD comes right after a
// DEL, as on a node under churn.
const (
	abA = ", build A (this tree)"
	abB = ", build B (-ab)"
)

// abRow names an A/B row: where is "" or besideSecond.
func abRow(verb, where, build string) string {
	return eipRow(verb, "IPv4", trafficBoth) + where + build
}

// addAB adds the A/B units when -ab names a tree and the plugin steers.
func addAB(b *bench, res *results) error {
	if b.opts.ab == "" || b.defaultTraffic() == trafficNone {
		return nil
	}
	n, err := newUplinkNode(b, "ab")
	if err != nil {
		return err
	}
	if x := b.execIn(n, b.uplinkCall("ADD", n, 350, up1IP(3, -1000, false))); x.err != nil {
		return fmt.Errorf("holding an IP on %s's second uplink: %w", n.name, x.err)
	}
	for i, where := range []string{"", besideSecond} {
		ip := func(it int) string { return scenarioIP(254, it, false) }
		if where != "" {
			ip = func(it int) string { return up1IP(2, it, false) }
		}
		unit := func(build, bin string, s int) timed {
			k := 1_000_000 + s
			a4, _ := containerAddrs(k)
			return b.pairUnit(res, abRow("ADD", where, build), "ab", n, func(it int) call {
				c := b.uplinkCall("ADD", n, k, ip(it))
				c.bin = b.bins[bin]
				return c
			}, a4)
		}
		res.units = append(res.units, b.adjacent(unit(abA, "external-ip", 360+i), unit(abB, "external-ip-b", 360+i)))
	}
	return nil
}

// abComparisons state B against A, paired, for each verb and place.
func abComparisons() []comparison {
	var cs []comparison
	for _, where := range []string{"", besideSecond} {
		for _, verb := range []string{"ADD", "DEL"} {
			cs = append(cs, comparison{ours: abRow(verb, where, abB), ref: abRow(verb, where, abA), diff: true, paired: true, cpu: true})
		}
	}
	return cs
}
