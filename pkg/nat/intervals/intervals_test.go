package intervals

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/nftables"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestMaximalKeepsOnlySubnetsNoOtherCovers(t *testing.T) {
	for _, c := range []struct{ in, want []netip.Prefix }{
		{prefixes("10.77.0.0/24", "10.77.0.0/16"), prefixes("10.77.0.0/16")},
		{prefixes("10.77.1.5/25", "10.77.0.0/16", "10.77.1.9/32", "fd00::5/64", "fd00::/48"), prefixes("10.77.0.0/16", "fd00::/48")},
		{prefixes("10.1.0.5/24", "10.1.0.6/24", "10.2.0.0/24"), prefixes("10.1.0.0/24", "10.2.0.0/24")},
		{prefixes("10.1.0.5/32", "10.1.0.6/32"), prefixes("10.1.0.5/32", "10.1.0.6/32")},
		{nil, nil},
	} {
		if got := Maximal(c.in); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("Maximal(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestCoversIsContainmentOfSubnets(t *testing.T) {
	for _, c := range []struct {
		q, p string
		want bool
	}{
		{"10.77.0.0/16", "10.77.1.0/24", true},
		{"10.77.0.0/16", "10.77.0.0/16", true},
		{"10.77.1.0/24", "10.77.0.0/16", false},
		{"10.77.0.0/16", "10.78.0.0/24", false},
		{"10.77.0.5/16", "10.77.9.9/32", true},
		{"10.0.0.0/8", "fd00::/64", false},
	} {
		if got := Covers(netip.MustParsePrefix(c.q), netip.MustParsePrefix(c.p)); got != c.want {
			t.Errorf("Covers(%s, %s) = %v, want %v", c.q, c.p, got, c.want)
		}
	}
}

func TestElementsLayOutKeysAsTheKernelCompares(t *testing.T) {
	hp := Element(Same(netip.MustParsePrefix("10.88.0.7/24")))
	if !bytes.Equal(hp.Key, []byte{10, 88, 0, 0, 10, 88, 0, 0}) || !bytes.Equal(hp.KeyEnd, []byte{10, 88, 0, 255, 10, 88, 0, 255}) {
		t.Errorf("element %v - %v, want the subnet's first address twice, to its last twice", hp.Key, hp.KeyEnd)
	}
	if p, ok := ParseSame(hp, 4); !ok || p != netip.MustParsePrefix("10.88.0.0/24") {
		t.Errorf("element read back as %v (ok %v)", p, ok)
	}
	odd := nftables.SetElement{Key: []byte{10, 88, 0, 0, 10, 88, 0, 7}, KeyEnd: []byte{10, 88, 0, 255, 10, 88, 0, 7}}
	if p, ok := ParseSame(odd, 4); ok {
		t.Errorf("an element whose halves differ read back as subnet %s", p)
	}
	two := Pair{netip.MustParsePrefix("10.88.0.0/24"), netip.MustParsePrefix("10.96.0.0/12")}
	el := Element(two)
	if !bytes.Equal(el.Key, []byte{10, 88, 0, 0, 10, 96, 0, 0}) || !bytes.Equal(el.KeyEnd, []byte{10, 88, 0, 255, 10, 111, 255, 255}) {
		t.Errorf("element of %v is %v - %v", two, el.Key, el.KeyEnd)
	}
	if got, ok := Parse(el, 4); !ok || got != two {
		t.Errorf("element of %v read back as %v (ok %v)", two, got, ok)
	}
}

func TestPrefixOfReadsBackTheSubnetOfAnInterval(t *testing.T) {
	for _, s := range []string{"10.88.0.0/24", "10.0.0.0/8", "10.88.0.5/32", "fd00:88::/64", "::/0"} {
		p := netip.MustParsePrefix(s)
		got, ok := PrefixOf(p.Addr(), LastAddr(p))
		if !ok || got != p {
			t.Errorf("%s read back as %v (ok %v)", s, got, ok)
		}
	}
	if p, ok := PrefixOf(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.6")); ok {
		t.Errorf("10.0.0.1-10.0.0.6 read back as prefix %s", p)
	}
}
