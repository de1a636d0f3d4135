package steer

// One comparison of the table the records want with the table the kernel
// has (Compare). Three consumers use its result: GC and repair apply
// it (Mend), status reports it (Diff.Drift), CHECK
// fails on the part of it that one attachment's rules make (Check). A new
// kind of rule is then compared in one place.

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/external-ip/external-ip/pkg/store"
)

// Want is the table, or the part of it that one attachment's rules
// make, as the records say it should be.
type Want struct {
	Ingress map[netip.Addr][]netip.Addr
	Egress  map[nat.EgressKey]netip.Addr
	Hairpin map[netip.Prefix]bool // container subnets, masked
	// Excluded are the exclusion elements (container subnet . destination).
	Excluded map[intervals.Pair]bool
	// Held lists the IPs some record holds, steered or not: a stray
	// ingress rule of a held IP loses only its DNATed flows (StrayFlows).
	Held map[netip.Addr]bool
}

// NewWant is a Want of nothing.
func NewWant() Want {
	return Want{Ingress: map[netip.Addr][]netip.Addr{}, Egress: map[nat.EgressKey]netip.Addr{},
		Hairpin: map[netip.Prefix]bool{}, Excluded: map[intervals.Pair]bool{}, Held: map[netip.Addr]bool{}}
}

// Empty says whether w wants no rule at all.
func (w Want) Empty() bool {
	return len(w.Ingress)+len(w.Egress)+len(w.Hairpin)+len(w.Excluded) == 0
}

// WantOf derives the table from every record: each IP's targets are its
// holders' in the order of their keys, as the index orders them.
func WantOf(recs map[string]*store.Record) Want {
	w := NewWant()
	holders := map[netip.Addr][]HeldBy{}
	for _, k := range slices.Sorted(maps.Keys(recs)) {
		r := recs[k]
		for _, ip := range r.IPs {
			w.Held[ip] = true
			holders[ip] = append(holders[ip], HeldBy{Key: k, Steering: r.Steering})
		}
		for _, e := range EgressOf(r.Steering) {
			w.Egress[nat.EgressKey{Source: e.Source, Uplink: e.Uplink}] = e.IP
		}
		if r.Steering != nil {
			for _, h := range r.Steering.Hairpin {
				w.Hairpin[h.Source.Masked()] = true
			}
		}
		for _, p := range ExclusionsOf(r.Steering) {
			w.Excluded[p] = true
		}
	}
	for ip, hs := range holders {
		if t := IngressTargets(ip, hs); len(t) > 0 {
			w.Ingress[ip] = t
		}
	}
	return w
}

// Diff is every way the table differs from a Want.
type Diff struct {
	// Broken says what is wrong with the table's fixed part ("is missing"
	// when the records want rules in a table that does not exist); empty
	// when it is intact.
	Broken string
	// Ingress lists the wanted IPs whose targets the table lacks, has
	// others of, or keeps in a chain that no element points at.
	Ingress []IngressDiff
	// StrayIngress lists our IPs the table steers and no record does.
	StrayIngress []IngressDiff
	// Egress lists the wanted sources whose rule is missing or is from
	// another IP; StrayEgress our rules that no record has.
	Egress, StrayEgress []EgressDiff
	// Unserved lists the wanted hairpin subnets no element of the sets covers.
	Unserved []netip.Prefix
	// Hairpin makes the hairpin sets hold exactly hairpinPlan's subnets.
	Hairpin nat.Change
	// Unexcluded lists the wanted exclusion elements whose flows the
	// sets do not all hold: those flows are SNATed.
	Unexcluded []intervals.Pair
	// Exclusion makes the exclusion sets serve exactly exclusionPlan's.
	Exclusion nat.Change
}

// IngressDiff is one IP whose targets differ: what is wanted, what the
// table has.
type IngressDiff struct {
	IP        netip.Addr
	Want, Got []netip.Addr
}

// EgressDiff is one egress rule that differs: the IP wanted, the table's.
type EgressDiff struct {
	Key       nat.EgressKey
	Want, Got netip.Addr
}

// Compare compares w with st, the table as package nat read it back.
// A rule for an IP that owns says is not ours (another holder device's
// state has it) is never stray.
func Compare(w Want, st *nat.State, owns func(netip.Addr) bool) Diff {
	var d Diff
	switch {
	case st.Present && len(st.Broken) > 0:
		d.Broken = fmt.Sprint(st.Broken)
	case !st.Present && !w.Empty():
		d.Broken = "is missing"
	}
	for _, ip := range sortedIPs(w.Ingress) {
		if got := st.Ingress[ip]; !slices.Equal(got, w.Ingress[ip]) || slices.Contains(st.Stray, ip) {
			d.Ingress = append(d.Ingress, IngressDiff{IP: ip, Want: w.Ingress[ip], Got: got})
		}
	}
	for _, ip := range slices.SortedFunc(slices.Values(withStray(st)), netip.Addr.Compare) {
		if _, ok := w.Ingress[ip]; !ok && owns(ip) {
			d.StrayIngress = append(d.StrayIngress, IngressDiff{IP: ip, Got: st.Ingress[ip]})
		}
	}
	for _, k := range sortedEgress(w.Egress) {
		if got := st.Egress[k]; got != w.Egress[k] {
			d.Egress = append(d.Egress, EgressDiff{Key: k, Want: w.Egress[k], Got: got})
		}
	}
	for _, k := range sortedEgress(st.Egress) {
		if _, ok := w.Egress[k]; !ok && owns(st.Egress[k]) {
			d.StrayEgress = append(d.StrayEgress, EgressDiff{Key: k, Got: st.Egress[k]})
		}
	}
	for _, p := range slices.SortedFunc(maps.Keys(w.Hairpin), comparePrefix) {
		if !hairpinServed(st, p) {
			d.Unserved = append(d.Unserved, p)
		}
	}
	d.Hairpin = hairpinPlan(st, w, owns)
	for _, p := range slices.SortedFunc(maps.Keys(w.Excluded), intervals.Compare) {
		if !intervals.Served(st.Excluded, p) {
			d.Unexcluded = append(d.Unexcluded, p)
		}
	}
	d.Exclusion = exclusionPlan(st, w, owns)
	return d
}

// exclusionPlan is the change that makes the exclusion sets serve
// exactly the records' elements and those whose container subnet holds a
// source the table SNATs for another holder device: that device's state
// has them, as it has its hairpin subnets.
func exclusionPlan(st *nat.State, w Want, owns func(netip.Addr) bool) nat.Change {
	var others []netip.Addr
	for k, ip := range st.Egress {
		if _, mine := w.Egress[k]; !mine && !owns(ip) {
			others = append(others, k.Source)
		}
	}
	keep := slices.Collect(maps.Keys(w.Excluded))
	for _, p := range st.Excluded {
		if slices.ContainsFunc(others, p.Src.Contains) {
			keep = append(keep, p)
		}
	}
	var ch nat.Change
	ch.Exclude, ch.DelExclude = intervals.Plan(st.Excluded, keep)
	return ch
}

// hairpinPlan is the change that makes the hairpin sets hold exactly the
// subnets that serve the records' (nested ones merged into the widest)
// and those into which the table steers another holder device's flows.
// A subnet that no record needs goes; one that a wider subnet covers
// serves nothing more.
func hairpinPlan(st *nat.State, w Want, owns func(netip.Addr) bool) nat.Change {
	var steered []netip.Addr
	for ip, targets := range st.Ingress {
		if _, mine := w.Ingress[ip]; !mine && !owns(ip) { // another device's
			steered = append(steered, targets...)
		}
	}
	keep := slices.Collect(maps.Keys(w.Hairpin))
	for _, p := range st.Hairpin {
		if slices.ContainsFunc(steered, p.Contains) {
			keep = append(keep, p)
		}
	}
	want := intervals.Maximal(keep)
	var ch nat.Change
	for _, p := range want {
		if !slices.Contains(st.Hairpin, p) {
			ch.Hairpin = append(ch.Hairpin, p)
		}
	}
	for _, p := range st.Hairpin {
		if !slices.Contains(want, p) {
			ch.DelHairpin = append(ch.DelHairpin, p)
		}
	}
	return ch
}

// hairpinServed tells whether the table's hairpin sets serve subnet p:
// they hold it or a subnet around it.
func hairpinServed(st *nat.State, p netip.Prefix) bool {
	return slices.ContainsFunc(st.Hairpin, func(q netip.Prefix) bool { return intervals.Covers(q, p) })
}

// Drift is d as status words it, one line per difference. With the state
// lost it also names the hairpin subnets GC would remove; otherwise not: a
// DEL leaves its subnet for GC by design (Change.KeepShared), and it
// steers nothing.
func (d Diff) Drift(lost bool) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if d.Broken != "" {
		add("nftables table inet %s: %s", nat.TableName, d.Broken)
	}
	for _, x := range d.Ingress {
		add("%s: ingress steers to %v, the records to %v", x.IP, x.Got, x.Want)
	}
	for _, x := range d.StrayIngress {
		add("%s: ingress rule to %v held by no record", x.IP, x.Got)
	}
	for _, x := range d.Egress {
		add("%s: egress via %s from %v, the records say %s", x.Key.Source, x.Key.Uplink, x.Got, x.Want)
	}
	for _, x := range d.StrayEgress {
		add("%s: egress via %s from %s held by no record", x.Key.Source, x.Key.Uplink, x.Got)
	}
	for _, p := range d.Unserved {
		add("%s: no hairpin rule for the subnet", p)
	}
	for _, p := range d.Hairpin.DelHairpin {
		if lost {
			add("%s: hairpin subnet needed by no record", p)
		}
	}
	for _, p := range d.Unexcluded {
		add("%s to %s: no egress exclusion element, its flows are SNATed", p.Src, p.Dst)
	}
	for _, p := range d.Exclusion.DelExclude {
		if lost {
			add("%s to %s: egress exclusion element needed by no record", p.Src, p.Dst)
		}
	}
	return out
}

// withStray lists the IPs the table steers, and those whose chain no
// element points at, once each.
func withStray(st *nat.State) []netip.Addr {
	out := slices.Collect(maps.Keys(st.Ingress))
	for _, ip := range st.Stray {
		if _, ok := st.Ingress[ip]; !ok && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	return out
}

func sortedIPs[V any](m map[netip.Addr]V) []netip.Addr {
	return slices.SortedFunc(maps.Keys(m), netip.Addr.Compare)
}

func sortedEgress(m map[nat.EgressKey]netip.Addr) []nat.EgressKey {
	return slices.SortedFunc(maps.Keys(m), func(a, b nat.EgressKey) int {
		if c := a.Source.Compare(b.Source); c != 0 {
			return c
		}
		return cmp.Compare(a.Uplink, b.Uplink)
	})
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
