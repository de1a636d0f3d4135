package nat

import (
	"fmt"
	"net/netip"
	"testing"
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
