package assigner

// One comparison of the table the records want with the table the kernel
// has (compareNAT). Three consumers use its result: GC and repair apply
// it (reconcileNAT), status reports it (reportNAT), CHECK fails on the part
// of it that one attachment's rules make (checkNAT). A new kind of rule is
// then compared in one place.

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
)

// natWant is the table, or the part of it that one attachment's rules
// make, as the records say it should be.
type natWant struct {
	ingress map[netip.Addr][]netip.Addr
	egress  map[nat.EgressKey]netip.Addr
	hairpin map[netip.Prefix]bool // container subnets, masked
	// held lists the IPs some record holds, steered or not: a stray
	// ingress rule of a held IP loses only its DNATed flows (strayFlows).
	held map[netip.Addr]bool
}

func newNATWant() natWant {
	return natWant{ingress: map[netip.Addr][]netip.Addr{}, egress: map[nat.EgressKey]netip.Addr{},
		hairpin: map[netip.Prefix]bool{}, held: map[netip.Addr]bool{}}
}

func (w natWant) empty() bool {
	return len(w.ingress)+len(w.egress)+len(w.hairpin) == 0
}

// wantNAT derives the table from every record: each IP's targets are its
// holders' in the order of their keys, as the index orders them.
func wantNAT(recs map[string]*record) natWant {
	w := newNATWant()
	holders := map[netip.Addr][]heldBy{}
	for _, k := range slices.Sorted(maps.Keys(recs)) {
		r := recs[k]
		for _, ip := range r.IPs {
			w.held[ip] = true
			holders[ip] = append(holders[ip], heldBy{key: k, s: r.Steering})
		}
		for _, e := range egressOf(r.Steering) {
			w.egress[nat.EgressKey{Source: e.Source, Uplink: e.Uplink}] = e.IP
		}
		if r.Steering != nil {
			for _, h := range r.Steering.Hairpin {
				w.hairpin[h.Source.Masked()] = true
			}
		}
	}
	for ip, hs := range holders {
		if t := ingressTargets(ip, hs); len(t) > 0 {
			w.ingress[ip] = t
		}
	}
	return w
}

// natDiff is every way the table differs from a natWant.
type natDiff struct {
	// broken says what is wrong with the table's fixed part ("is missing"
	// when the records want rules in a table that does not exist); empty
	// when it is intact.
	broken string
	// ingress lists the wanted IPs whose targets the table lacks, has
	// others of, or keeps in a chain that no element points at.
	ingress []ingressDiff
	// strayIngress lists our IPs the table steers and no record does.
	strayIngress []ingressDiff
	// egress lists the wanted sources whose rule is missing or is from
	// another IP; strayEgress our rules that no record has.
	egress, strayEgress []egressDiff
	// unserved lists the wanted hairpin subnets no element of the sets covers.
	unserved []netip.Prefix
	// hairpin makes the hairpin sets hold exactly hairpinPlan's subnets.
	hairpin nat.Change
}

type ingressDiff struct {
	ip        netip.Addr
	want, got []netip.Addr
}

type egressDiff struct {
	key       nat.EgressKey
	want, got netip.Addr
}

// compareNAT compares w with st, the table as package nat read it back.
// A rule for an IP that owns says is not ours (another holder device's
// state has it) is never stray.
func compareNAT(w natWant, st *nat.State, owns func(netip.Addr) bool) natDiff {
	var d natDiff
	switch {
	case st.Present && len(st.Broken) > 0:
		d.broken = fmt.Sprint(st.Broken)
	case !st.Present && !w.empty():
		d.broken = "is missing"
	}
	for _, ip := range sortedIPs(w.ingress) {
		if got := st.Ingress[ip]; !slices.Equal(got, w.ingress[ip]) || slices.Contains(st.Stray, ip) {
			d.ingress = append(d.ingress, ingressDiff{ip: ip, want: w.ingress[ip], got: got})
		}
	}
	for _, ip := range slices.SortedFunc(slices.Values(union(keys(st.Ingress), st.Stray)), netip.Addr.Compare) {
		if _, ok := w.ingress[ip]; !ok && owns(ip) {
			d.strayIngress = append(d.strayIngress, ingressDiff{ip: ip, got: st.Ingress[ip]})
		}
	}
	for _, k := range sortedEgress(w.egress) {
		if got := st.Egress[k]; got != w.egress[k] {
			d.egress = append(d.egress, egressDiff{key: k, want: w.egress[k], got: got})
		}
	}
	for _, k := range sortedEgress(st.Egress) {
		if _, ok := w.egress[k]; !ok && owns(st.Egress[k]) {
			d.strayEgress = append(d.strayEgress, egressDiff{key: k, got: st.Egress[k]})
		}
	}
	for _, p := range slices.SortedFunc(maps.Keys(w.hairpin), comparePrefix) {
		if !hairpinServed(st, p) {
			d.unserved = append(d.unserved, p)
		}
	}
	d.hairpin = hairpinPlan(st, w, owns)
	return d
}

// hairpinPlan is the change that makes the hairpin sets hold exactly the
// subnets that serve the records' (nested ones merged into the widest)
// and those into which the table steers another holder device's flows.
// A subnet that no record needs goes; one that a wider subnet covers
// serves nothing more.
func hairpinPlan(st *nat.State, w natWant, owns func(netip.Addr) bool) nat.Change {
	var steered []netip.Addr
	for ip, targets := range st.Ingress {
		if _, mine := w.ingress[ip]; !mine && !owns(ip) { // another device's
			steered = append(steered, targets...)
		}
	}
	keep := slices.Collect(maps.Keys(w.hairpin))
	for _, p := range st.Hairpin {
		if slices.ContainsFunc(steered, p.Contains) {
			keep = append(keep, p)
		}
	}
	want := nat.Maximal(keep)
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
	return slices.ContainsFunc(st.Hairpin, func(q netip.Prefix) bool { return nat.Covers(q, p) })
}

// drift is d as status words it, one line per difference. With the state
// lost it also names the hairpin subnets GC would remove; otherwise not: a
// DEL leaves its subnet for GC by design (see keepSharedHairpins), and it
// steers nothing.
func (d natDiff) drift(lost bool) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if d.broken != "" {
		add("nftables table inet %s: %s", nat.TableName, d.broken)
	}
	for _, x := range d.ingress {
		add("%s: ingress steers to %v, the records to %v", x.ip, x.got, x.want)
	}
	for _, x := range d.strayIngress {
		add("%s: ingress rule to %v held by no record", x.ip, x.got)
	}
	for _, x := range d.egress {
		add("%s: egress via %s from %v, the records say %s", x.key.Source, x.key.Uplink, x.got, x.want)
	}
	for _, x := range d.strayEgress {
		add("%s: egress via %s from %s held by no record", x.key.Source, x.key.Uplink, x.got)
	}
	for _, p := range d.unserved {
		add("%s: no hairpin rule for the subnet", p)
	}
	for _, p := range d.hairpin.DelHairpin {
		if lost {
			add("%s: hairpin subnet needed by no record", p)
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
