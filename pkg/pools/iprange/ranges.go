package iprange

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"
)

// Family indexes the two address families.
type Family int

const (
	IPv4 Family = iota
	IPv6
)

func (f Family) String() string { return [...]string{"IPv4", "IPv6"}[f] }

// FamilyOf is ip's family.
func FamilyOf(ip netip.Addr) Family {
	if ip.Is4() {
		return IPv4
	}
	return IPv6
}

// Range is one entry of spec.ranges: the IPs it covers, and those of them
// that a pool request may be given.
type Range struct {
	Text  string
	Cover netipx.IPRange
	Give  netipx.IPRange // zero when it gives none (never: a /32 gives itself)
}

// Ranges are a pool's ranges, in spec order.
type Ranges []Range

// ParseRanges reads spec.ranges as the CRD's schema admits them (a CIDR
// with no host bits set, or first-last of one family with first not after
// last, each canonical), and refuses ranges that overlap each other. The
// error names the field, the value and the reason, in one line.
func ParseRanges(texts []string) (Ranges, error) { return Parse("spec.ranges", texts) }

// Parse is ParseRanges for ranges written in field (a node-local pool of
// the plugin's config: "pools.web").
func Parse(field string, texts []string) (Ranges, error) {
	if len(texts) == 0 {
		return nil, fmt.Errorf("%s: empty", field)
	}
	out := make(Ranges, 0, len(texts))
	for i, t := range texts {
		r, err := parseRange(t)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %q %s", field, i, t, err)
		}
		for _, o := range out {
			if o.Cover.Overlaps(r.Cover) {
				return nil, fmt.Errorf("%s[%d]: %q overlaps %q of the same pool", field, i, t, o.Text)
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func parseRange(t string) (Range, error) {
	if strings.Contains(t, "/") {
		p, err := netip.ParsePrefix(t)
		switch {
		case err != nil || p.Addr().Zone() != "":
			return Range{}, fmt.Errorf("is not a CIDR")
		case p.Addr().Is4In6():
			return Range{}, fmt.Errorf("is an IPv4-mapped IPv6 range; write it as IPv4")
		case p.Masked().String() != t:
			return Range{}, fmt.Errorf("must be written %s (no host bits set, canonical)", p.Masked())
		}
		return Range{Text: t, Cover: netipx.RangeOfPrefix(p), Give: giveOfPrefix(p)}, nil
	}
	first, last, ok := strings.Cut(t, "-")
	a, errA := netip.ParseAddr(first)
	b, errB := netip.ParseAddr(last)
	switch {
	case !ok || errA != nil || errB != nil || a.Zone() != "" || b.Zone() != "":
		return Range{}, fmt.Errorf("is neither a CIDR nor first-last")
	case a.Is4In6() || b.Is4In6():
		return Range{}, fmt.Errorf("holds an IPv4-mapped IPv6 address; write it as IPv4")
	case a.String() != first || b.String() != last:
		return Range{}, fmt.Errorf("must be written %s-%s (canonical)", a, b)
	case a.Is4() != b.Is4():
		return Range{}, fmt.Errorf("mixes IPv4 and IPv6")
	case b.Less(a):
		return Range{}, fmt.Errorf("has first after last")
	}
	r := netipx.IPRangeFrom(a, b)
	return Range{Text: t, Cover: r, Give: r}, nil
}

// giveOfPrefix leaves out what a CIDR's own hosts could not use, as
// Kubernetes' Service allocator does: an IPv4 CIDR's network and broadcast
// addresses and an IPv6 CIDR's first (subnet-router anycast) address. A
// /31, /32, /127 or /128 gives all it has.
func giveOfPrefix(p netip.Prefix) netipx.IPRange {
	r := netipx.RangeOfPrefix(p)
	host := p.Addr().BitLen() - p.Bits()
	if host < 2 {
		return r
	}
	from, to := r.From().Next(), r.To()
	if p.Addr().Is4() {
		to = to.Prev()
	}
	return netipx.IPRangeFrom(from, to)
}

// Covers says whether ip lies in one of the ranges.
func (rs Ranges) Covers(ip netip.Addr) bool {
	return slices.ContainsFunc(rs, func(r Range) bool { return r.Cover.Contains(ip) })
}

// Families are the families the pool gives IPs of, IPv4 first.
func (rs Ranges) Families() []Family {
	var v4, v6 bool
	for _, r := range rs {
		v4, v6 = v4 || r.Give.From().Is4(), v6 || r.Give.From().Is6()
	}
	var out []Family
	if v4 {
		out = append(out, IPv4)
	}
	if v6 {
		out = append(out, IPv6)
	}
	return out
}

// Size is how many IPs of family f the pool gives, at most MaxUint64.
func (rs Ranges) Size(f Family) uint64 {
	var n uint64
	for _, r := range rs {
		if FamilyOf(r.Give.From()) == f {
			n = addSat(n, rangeSize(r.Give))
		}
	}
	return n
}

// Total is the pool's size over both families, at most MaxInt64 (the
// status's integer).
func (rs Ranges) Total() int64 {
	n := addSat(rs.Size(IPv4), rs.Size(IPv6))
	return int64(min(n, math.MaxInt64))
}

// At is the n-th IP of family f that the pool gives, counting the ranges
// in spec order; n must be below Size(f).
func (rs Ranges) At(f Family, n uint64) netip.Addr {
	for _, r := range rs {
		if FamilyOf(r.Give.From()) != f {
			continue
		}
		size := rangeSize(r.Give)
		if n < size || size == math.MaxUint64 {
			return addOffset(r.Give.From(), n)
		}
		n -= size
	}
	return netip.Addr{}
}

// rangeSize is the count of IPs in r, at most MaxUint64.
func rangeSize(r netipx.IPRange) uint64 {
	a, b := r.From().As16(), r.To().As16()
	lo, borrow := bits.Sub64(binary.BigEndian.Uint64(b[8:]), binary.BigEndian.Uint64(a[8:]), 0)
	hi, _ := bits.Sub64(binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(a[:8]), borrow)
	if hi != 0 || lo == math.MaxUint64 {
		return math.MaxUint64
	}
	return lo + 1
}

// addOffset is ip + n, within its family (n never carries past it here).
func addOffset(ip netip.Addr, n uint64) netip.Addr {
	b := ip.As16()
	lo, carry := bits.Add64(binary.BigEndian.Uint64(b[8:]), n, 0)
	binary.BigEndian.PutUint64(b[8:], lo)
	binary.BigEndian.PutUint64(b[:8], binary.BigEndian.Uint64(b[:8])+carry)
	out := netip.AddrFrom16(b)
	if ip.Is4() {
		return out.Unmap()
	}
	return out
}

func addSat(a, b uint64) uint64 {
	if a+b < a {
		return math.MaxUint64
	}
	return a + b
}

// Overlap names the first range of a and of b that share an IP.
func Overlap(a, b Ranges) (mine, theirs string, ok bool) {
	for _, x := range a {
		for _, y := range b {
			if x.Cover.Overlaps(y.Cover) {
				return x.Text, y.Text, true
			}
		}
	}
	return "", "", false
}
