package intervals

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// Pair is one element: flows from Src to Dst.
type Pair struct{ Src, Dst netip.Prefix }

// Same is the pair of flows within subnet p, both halves p.
func Same(p netip.Prefix) Pair { return Pair{p.Masked(), p.Masked()} }

// Covers tells whether the element of subnet q also serves p: every
// address of p is in q.
func Covers(q, p netip.Prefix) bool {
	return q.Bits() <= p.Bits() && q.Masked().Contains(p.Addr())
}

// Maximal is subnets, masked, without duplicates and without those that
// another of them covers, sorted: the elements (each p . p) that serve
// them all. Container subnets overlap when a network's subnet is widened
// (a /24 becomes a /16) or a main plugin gives a /32 inside another
// network's subnet.
func Maximal(subnets []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range subnets {
		p = p.Masked()
		if slices.ContainsFunc(subnets, func(q netip.Prefix) bool { return Covers(q, p) && q.Bits() < p.Bits() }) || slices.Contains(out, p) {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, ComparePrefix)
	return out
}

// ComparePrefix orders prefixes by address, then the wider first.
func ComparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// Element is p's interval element, (first . first) - (last . last), as
// nft stores 10.88.0.0/24 . 10.96.0.0/12.
func Element(p Pair) nftables.SetElement {
	s, d := p.Src.Masked(), p.Dst.Masked()
	return nftables.SetElement{
		Key:    append(s.Addr().AsSlice(), d.Addr().AsSlice()...),
		KeyEnd: append(LastAddr(s).AsSlice(), LastAddr(d).AsSlice()...),
	}
}

// Parse reads back Element's pair from an element of a set of addresses
// n bytes long; ok is false for an element it did not make (a range that
// is no prefix).
func Parse(el nftables.SetElement, n int) (Pair, bool) {
	if len(el.Key) != 2*n || len(el.KeyEnd) != 2*n {
		return Pair{}, false
	}
	src, okS := span(el.Key[:n], el.KeyEnd[:n])
	dst, okD := span(el.Key[n:], el.KeyEnd[n:])
	return Pair{src, dst}, okS && okD
}

// ParseSame reads back an element of Same's pair: its subnet.
func ParseSame(el nftables.SetElement, n int) (netip.Prefix, bool) {
	p, ok := Parse(el, n)
	if !ok || p.Src != p.Dst {
		return netip.Prefix{}, false
	}
	return p.Src, true
}

func span(first, last []byte) (netip.Prefix, bool) {
	a, okA := netip.AddrFromSlice(first)
	b, okB := netip.AddrFromSlice(last)
	if !okA || !okB {
		return netip.Prefix{}, false
	}
	return PrefixOf(a, b)
}

// LastAddr is p's last address.
func LastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// PrefixOf is the prefix from first to last, if they span one exactly.
func PrefixOf(first, last netip.Addr) (netip.Prefix, bool) {
	for bits := first.BitLen(); bits >= 0; bits-- {
		p := netip.PrefixFrom(first, bits)
		if p.Masked().Addr() == first && LastAddr(p) == last {
			return p, true
		}
	}
	return netip.Prefix{}, false
}
