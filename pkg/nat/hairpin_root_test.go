package nat

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat/intervals"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func readHairpin(t *testing.T, tb *Table) string {
	t.Helper()
	st, err := tb.Read()
	must(t, err)
	return fmt.Sprint(st.Hairpin)
}

// Container subnets nest when a network is widened or a main plugin gives
// a /32 or /25 inside another network's subnet: the hairpin sets refuse an
// overlapping element, so the change merges them, in one transaction.
func TestNestedHairpinSubnetsMergeInOneChange(t *testing.T) {
	inNetNS(t, func(netns string, tb *Table) {
		must(t, tb.Ensure())
		steps := []struct {
			what string
			ch   Change
			want string
		}{
			{"a /24", Change{Hairpin: prefixes("10.77.0.5/24", "fd00:77::5/64")}, "[10.77.0.0/24 fd00:77::/64]"},
			{"the /16 around it", Change{Hairpin: prefixes("10.77.0.6/16")}, "[10.77.0.0/16 fd00:77::/64]"},
			{"a /32 and a /25 inside", Change{Hairpin: prefixes("10.77.0.7/32", "10.77.1.7/25", "fd00:77::7/128")}, "[10.77.0.0/16 fd00:77::/64]"},
			{"the /16 replaced by the /24 (GC)", Change{DelHairpin: prefixes("10.77.0.0/16"), Hairpin: prefixes("10.77.0.0/24")}, "[10.77.0.0/24 fd00:77::/64]"},
			{"a /24 beside, then the /16 over both", Change{Hairpin: prefixes("10.77.2.0/24")}, "[10.77.0.0/24 10.77.2.0/24 fd00:77::/64]"},
			{"the /16 over both", Change{Hairpin: prefixes("10.77.0.0/16", "fd00::/16")}, "[10.77.0.0/16 fd00::/16]"},
		}
		for _, s := range steps {
			must(t, tb.Apply(s.ch))
			if got := readHairpin(t, tb); got != s.want {
				t.Fatalf("after %s the hairpin sets hold %s, want %s", s.what, got, s.want)
			}
		}
		must(t, tb.SetHairpin(netip.MustParsePrefix("10.77.3.3/24")))
		if got, want := readHairpin(t, tb), "[10.77.0.0/16 fd00::/16]"; got != want {
			t.Fatalf("after SetHairpin of a covered /24 the sets hold %s, want %s", got, want)
		}
		// A /8 whose first and last addresses are outside the /16: the
		// kernel takes it beside the /16 (it checks only the new element's
		// ends), which serves the same flows; GC drops the /16.
		must(t, tb.SetHairpin(netip.MustParsePrefix("10.0.0.0/8")))
		st, err := tb.Read()
		must(t, err)
		if got, want := fmt.Sprint(intervals.Maximal(st.Hairpin)), "[10.0.0.0/8 fd00::/16]"; got != want {
			t.Fatalf("after SetHairpin of a /8 around the /16 the sets serve %s, want %s", got, want)
		}
	})
}

// The check an ADD that steers makes of the base chains (EnsureBase), on
// its own and as part of an ADD's change: what it adds to every such ADD.
func BenchmarkEnsureBase(b *testing.B) {
	t := &testing.T{}
	inNetNS(t, func(netns string, tb *Table) {
		if err := tb.Ensure(); err != nil {
			b.Fatal(err)
		}
		b.Run("one element read (a round trip, for scale)", func(b *testing.B) {
			for b.Loop() {
				if _, _, err := tb.c.GetElement(ipv4.direct, ext4.AsSlice()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("baseIntact", func(b *testing.B) {
			for b.Loop() {
				if ok, err := tb.baseIntact(); !ok || err != nil {
					b.Fatalf("base intact %v: %v", ok, err)
				}
			}
		})
		for _, ensure := range []bool{false, true} {
			b.Run(fmt.Sprintf("ADD change, EnsureBase %v", ensure), func(b *testing.B) {
				i := 0
				for b.Loop() {
					i++
					ip := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
					ctr := netip.AddrFrom4([4]byte{10, 88, byte(i >> 8), byte(i)})
					ch := Change{Ingress: map[netip.Addr][]netip.Addr{ip: {ctr}}, Fresh: map[netip.Addr]bool{ip: true},
						Egress: map[EgressKey]netip.Addr{{ctr, "uplink0"}: ip}, Hairpin: []netip.Prefix{sub4}, EnsureBase: ensure}
					if err := tb.Apply(ch); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	})
}
