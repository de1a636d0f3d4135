package steer

// What one record's steering says: the rules an ADD's record keeps
// (Decide), and what they steer (Target, EgressOf, EgressVia).

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// Decide is what an ADD's record keeps so that its rules can be made,
// checked and removed: egress from each container address through each
// uplink (uplinks: each IP's) of its family's IPs, from the first such IP
// in request order (ips'); and a hairpin rule per target, from its own
// subnet; and, when it steers egress, the destinations its flows keep
// their own source for (excluded). It is nil when mode steers nothing.
func Decide(mode traffic.Mode, container []netip.Prefix, ips []netip.Addr, uplinks map[netip.Addr]string, excluded []netip.Prefix) *store.Steering {
	if !mode.Steers() {
		return nil
	}
	s := &store.Steering{Traffic: string(mode), Container: container}
	s.Egress = EgressVia(s, ips, uplinks)
	if steersEgress(s) {
		s.Excluded = excluded
	}
	for _, ip := range ips {
		if t, ok := Target(s, ip); ok && !slices.ContainsFunc(s.Hairpin, func(h store.HairpinRule) bool { return h.Target == t }) {
			s.Hairpin = append(s.Hairpin, store.HairpinRule{Source: prefixOf(s, t).Masked(), Target: t})
		}
	}
	return s
}

// steersIngress says whether s steers the flows to its IPs.
func steersIngress(s *store.Steering) bool {
	return s != nil && traffic.Mode(s.Traffic).Ingress()
}

// steersEgress says whether s steers the flows its holder sends.
func steersEgress(s *store.Steering) bool {
	return s != nil && traffic.Mode(s.Traffic).Egress()
}

// EgressOf is s's egress rules; none for no steering.
func EgressOf(s *store.Steering) []store.EgressRule {
	if s == nil {
		return nil
	}
	return s.Egress
}

// Target is the container address that flows to ip go to: the first of
// ip's family.
func Target(s *store.Steering, ip netip.Addr) (netip.Addr, bool) {
	if !steersIngress(s) {
		return netip.Addr{}, false
	}
	for _, c := range s.Container {
		if c.Addr().Is4() == ip.Is4() {
			return c.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// EgressVia is s's egress: from each container address through the
// uplink of each IP of its family, from the first such IP in ips' order.
func EgressVia(s *store.Steering, ips []netip.Addr, uplinks map[netip.Addr]string) []store.EgressRule {
	if !steersEgress(s) {
		return nil
	}
	var out []store.EgressRule
	seen := map[nat.EgressKey]bool{}
	for _, ip := range ips {
		for _, c := range s.Container {
			k := nat.EgressKey{Source: c.Addr(), Uplink: uplinks[ip]}
			if c.Addr().Is4() == ip.Is4() && k.Uplink != "" && !seen[k] {
				seen[k] = true
				out = append(out, store.EgressRule{Source: k.Source, Uplink: k.Uplink, IP: ip})
			}
		}
	}
	return out
}

// ExclusionsOf is s's exclusion elements: each container subnet with each
// excluded destination of its family. Keyed by subnet, as the hairpin set
// is: the attachments of one network share their elements, so that a
// network's ADD adds none the set lacks but its first.
func ExclusionsOf(s *store.Steering) []intervals.Pair {
	if !steersEgress(s) {
		return nil
	}
	var out []intervals.Pair
	for _, c := range s.Container {
		for _, e := range s.Excluded {
			p := intervals.Pair{Src: c.Masked(), Dst: e.Masked()}
			if c.Addr().Is4() == e.Addr().Is4() && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// prefixOf is the prefix s has for its container address a.
func prefixOf(s *store.Steering, a netip.Addr) netip.Prefix {
	for _, c := range s.Container {
		if c.Addr() == a {
			return c
		}
	}
	return netip.PrefixFrom(a, a.BitLen())
}
