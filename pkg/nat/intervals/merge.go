package intervals

import (
	"net/netip"
	"slices"
)

// Covers tells whether every flow of p is a flow of q.
func (q Pair) Covers(p Pair) bool { return Covers(q.Src, p.Src) && Covers(q.Dst, p.Dst) }

func (q Pair) overlaps(p Pair) bool {
	return overlap(q.Src, p.Src) && overlap(q.Dst, p.Dst)
}

// overlap: two prefixes share an address exactly when one covers the other.
func overlap(a, b netip.Prefix) bool { return Covers(a, b) || Covers(b, a) }

// Disjoint is the elements that serve exactly the flows of pairs, no two
// overlapping, sorted: pairs masked, without duplicates and those another
// covers, and what is left of each once the wider ones before it are
// taken out. Two pairs overlap without one covering the other only when
// both their sources and their destinations nest the other way round (a
// network's /16 excluding a /24, another's /24 inside it excluding a
// /12): the narrower source's pair is then cut around the other.
func Disjoint(pairs []Pair) []Pair {
	var in []Pair
	for _, p := range pairs {
		p = Pair{p.Src.Masked(), p.Dst.Masked()}
		if !slices.ContainsFunc(pairs, func(q Pair) bool { return q.Covers(p) && !p.Covers(q) }) && !slices.Contains(in, p) {
			in = append(in, p)
		}
	}
	slices.SortFunc(in, widerFirst)
	var out []Pair
	for _, p := range in {
		out = append(out, without(p, out)...)
	}
	slices.SortFunc(out, Compare)
	return out
}

// Served tells whether the flows of p are all flows of held's elements.
func Served(held []Pair, p Pair) bool { return len(without(p, held)) == 0 }

// Merge is the change that makes a set holding held hold held less del,
// with add: Plan's, so that it removes only what the set holds.
func Merge(held, del, add []Pair) (addOut, delOut []Pair) {
	want := slices.DeleteFunc(slices.Clone(held), func(p Pair) bool { return slices.Contains(del, p) })
	return Plan(held, append(want, add...))
}

// Plan is the change that makes a set holding held hold Disjoint(want):
// nothing when it already serves exactly want's flows, however its
// elements are cut.
func Plan(held, want []Pair) (add, del []Pair) {
	if sameFlows(held, want) {
		return nil, nil
	}
	next := Disjoint(want)
	for _, p := range next {
		if !slices.Contains(held, p) {
			add = append(add, p)
		}
	}
	for _, p := range held {
		if !slices.Contains(next, p) {
			del = append(del, p)
		}
	}
	return add, del
}

func sameFlows(a, b []Pair) bool {
	for _, p := range a {
		if !Served(b, p) {
			return false
		}
	}
	for _, p := range b {
		if !Served(a, p) {
			return false
		}
	}
	return true
}

// without is what is left of p once every pair of from is taken out, as
// pairs that overlap none of from.
func without(p Pair, from []Pair) []Pair {
	left := []Pair{p}
	for _, q := range from {
		var next []Pair
		for _, x := range left {
			next = append(next, minusPair(x, q)...)
		}
		left = next
	}
	return left
}

// minusPair is x without q: the part of x whose source is outside q's,
// then the part whose source is inside it and destination outside.
func minusPair(x, q Pair) []Pair {
	if !x.overlaps(q) {
		return []Pair{x}
	}
	src, dst := narrower(x.Src, q.Src), narrower(x.Dst, q.Dst)
	var out []Pair
	for _, s := range minus(x.Src, src) {
		out = append(out, Pair{s, x.Dst})
	}
	for _, d := range minus(x.Dst, dst) {
		out = append(out, Pair{src, d})
	}
	return out
}

func narrower(a, b netip.Prefix) netip.Prefix {
	if a.Bits() >= b.Bits() {
		return a
	}
	return b
}

// minus is p without q, q inside p: the sibling of each prefix on the
// way down from p to q.
func minus(p, q netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for bits := p.Bits() + 1; bits <= q.Bits(); bits++ {
		b := q.Addr().AsSlice()
		b[(bits-1)/8] ^= 0x80 >> ((bits - 1) % 8)
		a, _ := netip.AddrFromSlice(b)
		out = append(out, netip.PrefixFrom(a, bits).Masked())
	}
	return out
}

// Compare orders pairs by source, then destination.
func Compare(a, b Pair) int {
	if c := ComparePrefix(a.Src, b.Src); c != 0 {
		return c
	}
	return ComparePrefix(a.Dst, b.Dst)
}

// widerFirst orders pairs by the width of their source, then of their
// destination, so that Disjoint keeps the widest whole.
func widerFirst(a, b Pair) int {
	if c := a.Src.Bits() - b.Src.Bits(); c != 0 {
		return c
	}
	if c := a.Dst.Bits() - b.Dst.Bits(); c != 0 {
		return c
	}
	return Compare(a, b)
}
