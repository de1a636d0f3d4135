package iprange

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func TestParseRangesNamesTheFieldTheValueAndTheReason(t *testing.T) {
	for _, tc := range []struct {
		ranges []string
		want   string
	}{
		{nil, "spec.ranges: empty"},
		{[]string{"192.0.2.0/24", "nope"}, `spec.ranges[1]: "nope" is neither a CIDR nor first-last`},
		{[]string{"192.0.2.1/24"}, `spec.ranges[0]: "192.0.2.1/24" must be written 192.0.2.0/24 (no host bits set, canonical)`},
		{[]string{"2001:DB8::/32"}, `must be written 2001:db8::/32`},
		{[]string{"192.0.2.0/33"}, `is not a CIDR`},
		{[]string{"::ffff:192.0.2.0/120"}, `IPv4-mapped`},
		{[]string{"192.0.2.20-192.0.2.10"}, `has first after last`},
		{[]string{"192.0.2.1-2001:db8::1"}, `mixes IPv4 and IPv6`},
		{[]string{"192.0.2.01-192.0.2.10"}, `neither a CIDR nor first-last`},
		{[]string{"2001:db8::0001-2001:db8::9"}, `must be written 2001:db8::1-2001:db8::9 (canonical)`},
		{[]string{"192.0.2.0/28", "192.0.2.10-192.0.2.20"}, `spec.ranges[1]: "192.0.2.10-192.0.2.20" overlaps "192.0.2.0/28" of the same pool`},
	} {
		_, err := ParseRanges(tc.ranges)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseRanges(%q) = %v, want an error with %q", tc.ranges, err, tc.want)
		}
	}
}

func TestACIDRGivesNeitherItsNetworkNorItsBroadcastAndARangeGivesAll(t *testing.T) {
	rs, err := ParseRanges([]string{"192.0.2.0/30", "198.51.100.7-198.51.100.8", "192.0.2.8/31", "2001:db8::/126", "2001:db8:1::5/128"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range rs.Families() {
		for n := range rs.Size(f) {
			got = append(got, rs.At(f, n).String())
		}
	}
	want := "192.0.2.1 192.0.2.2 198.51.100.7 198.51.100.8 192.0.2.8 192.0.2.9 2001:db8::1 2001:db8::2 2001:db8::3 2001:db8:1::5"
	if strings.Join(got, " ") != want {
		t.Errorf("the pool gives %v, want %s", got, want)
	}
	if rs.Total() != 10 {
		t.Errorf("Total %d, want 10", rs.Total())
	}
	if !rs.Covers(netip.MustParseAddr("192.0.2.0")) || rs.Covers(netip.MustParseAddr("192.0.2.4")) {
		t.Error("Covers: the network address is covered (an explicit IP may name it), 192.0.2.4 is not")
	}
}

func TestAHugeIPv6RangeSaturatesItsSizeAndStillIndexes(t *testing.T) {
	rs, err := ParseRanges([]string{"2001:db8::/32"})
	if err != nil {
		t.Fatal(err)
	}
	if rs.Size(IPv6) != math.MaxUint64 || rs.Total() != math.MaxInt64 || rs.Size(IPv4) != 0 {
		t.Errorf("sizes %d %d %d; want saturated, and no IPv4", rs.Size(IPv6), rs.Total(), rs.Size(IPv4))
	}
	if got := rs.At(IPv6, 1<<40); got != netip.MustParseAddr("2001:db8::100:0:1") {
		t.Errorf("At(2^40) = %s", got)
	}
	if got := rs.At(IPv6, math.MaxUint64-1); got != netip.MustParseAddr("2001:db8::ffff:ffff:ffff:ffff") {
		t.Errorf("At(max-1) = %s: the carry into the upper half is lost", got)
	}
	rs, _ = ParseRanges([]string{"2001:db8::ffff:ffff:ffff:fff0-2001:db8:0:1::10"})
	if rs.Size(IPv6) != 33 || rs.At(IPv6, 20) != netip.MustParseAddr("2001:db8:0:1::4") {
		t.Errorf("a range across a 64-bit boundary: size %d, At(20) %s", rs.Size(IPv6), rs.At(IPv6, 20))
	}
}

func TestKeysCompareAsTheIPsDo(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	addr := func() netip.Addr {
		var b [16]byte
		for i := range b {
			b[i] = byte(r.IntN(4) * 85) // few values: equal groups and zeros are common
		}
		if r.IntN(2) == 0 {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16(b)
	}
	for range 5000 {
		a, b := addr(), addr()
		want := a.Compare(b) // IPv4 sorts before IPv6, as the keys do
		if got := strings.Compare(Key(a), Key(b)); got != want {
			t.Fatalf("Key(%s)=%s, Key(%s)=%s compare %d, the IPs %d", a, Key(a), b, Key(b), got, want)
		}
	}
}

func TestOverlapNamesTheRangesThatShareAnIP(t *testing.T) {
	a, _ := ParseRanges([]string{"2001:db8::/64", "192.0.2.0/28"})
	b, _ := ParseRanges([]string{"198.51.100.0/24", "192.0.2.15-192.0.2.20"})
	c, _ := ParseRanges([]string{"192.0.2.16-192.0.2.20"})
	if m, th, ok := Overlap(a, b); !ok || m != "192.0.2.0/28" || th != "192.0.2.15-192.0.2.20" {
		t.Errorf("Overlap = %q %q %v", m, th, ok)
	}
	if _, _, ok := Overlap(a, c); ok {
		t.Error("192.0.2.0/28 and 192.0.2.16-192.0.2.20 share no IP")
	}
}

// A range that spans the IPv4-mapped block with neither end in it covers
// mapped addresses all the same.
func TestARangeAcrossTheIPv4MappedBlockIsUnusable(t *testing.T) {
	rs, err := Parse("pools.p", []string{"::fffe:0:0-::1:0:0:0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := Unusable(rs[0]); got != "IPv4-mapped IPv6 addresses" {
		t.Errorf("Unusable(%s) = %q, want the IPv4-mapped class", rs[0].Text, got)
	}
}
