package steer

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/store"
)

// ErrDrift: CHECK found the table not as the records say (plugin code
// 104); the kind every floor shares.
var ErrDrift = errkind.Drift

func driftf(format string, args ...any) error { return errkind.Errorf(ErrDrift, format, args...) }

// WantOfRecord is the part of the table that rec's rules make: the
// ingress of its steered IPs, to the targets of all their holders
// (holders, read from the index and their records), its egress and its
// hairpin subnets and exclusion elements.
func WantOfRecord(rec *store.Record, holders map[netip.Addr][]HeldBy) Want {
	w := NewWant()
	for ip, hs := range holders {
		w.Ingress[ip] = IngressTargets(ip, hs)
	}
	for _, e := range rec.Steering.Egress {
		w.Egress[nat.EgressKey{Source: e.Source, Uplink: e.Uplink}] = e.IP
	}
	for _, h := range rec.Steering.Hairpin {
		w.Hairpin[h.Source.Masked()] = true
	}
	for _, p := range ExclusionsOf(rec.Steering) {
		w.Excluded[p] = true
	}
	return w
}

// Steered lists the IPs of rec whose flows its steering sends to its
// container.
func Steered(rec *store.Record) []netip.Addr {
	var out []netip.Addr
	for _, ip := range rec.IPs {
		if _, ok := Target(rec.Steering, ip); ok {
			out = append(out, ip)
		}
	}
	return out
}

// Check fails CHECK when a rule of rec is missing or points elsewhere, or
// uses a container address that prevResult no longer gives: container is
// the container's addresses as CHECK's prevResult gives them, d the
// comparison of the part of the table rec's rules make (WantOfRecord) with
// the table, uplinkOf each egress IP's uplink as its index has it now.
// What is stray is no one attachment's drift: status and GC see it.
func Check(rec *store.Record, container []netip.Prefix, d Diff, uplinkOf func(netip.Addr) (string, error)) error {
	s := rec.Steering
	if err := checkContainer(rec, container); err != nil {
		return err
	}
	if d.Broken != "" {
		return driftf("nftables table inet %s: %s", nat.TableName, d.Broken)
	}
	if err := checkIngress(s, d.Ingress); err != nil {
		return err
	}
	if err := checkEgressUplinks(s, uplinkOf); err != nil {
		return err
	}
	if len(d.Egress) > 0 {
		x := d.Egress[0]
		if !x.Got.IsValid() {
			return driftf("%s: no egress rule via %s (from %s) in table inet %s", x.Key.Source, x.Key.Uplink, x.Want, nat.TableName)
		}
		return driftf("%s: egress via %s is not from %s in table inet %s (it is %v)", x.Key.Source, x.Key.Uplink, x.Want, nat.TableName, x.Got)
	}
	for _, h := range s.Hairpin {
		if slices.Contains(d.Unserved, h.Source.Masked()) {
			return driftf("%s: no hairpin rule for its subnet %s in table inet %s", h.Target, h.Source.Masked(), nat.TableName)
		}
	}
	if len(d.Unexcluded) > 0 {
		p := d.Unexcluded[0]
		return driftf("%s to %s: no egress exclusion element in table inet %s, its flows are SNATed", p.Src, p.Dst, nat.TableName)
	}
	return nil
}

// checkContainer fails when a steered IP's target, or the source of an
// egress rule, is not an address that container (CHECK's prevResult)
// gives: the ADD took them from its own prevResult, and CHECK's is that
// ADD's final result (the CNI spec), so the flows would go to, or leave
// from, an address the runtime no longer gives the container. A later
// plugin of the chain may add addresses, so only those the rules use
// must be there.
func checkContainer(rec *store.Record, container []netip.Prefix) error {
	gives := func(a netip.Addr) bool {
		return slices.ContainsFunc(container, func(p netip.Prefix) bool { return p.Addr() == a })
	}
	for _, ip := range Steered(rec) {
		if t, _ := Target(rec.Steering, ip); !gives(t) {
			return driftf("%s: steered to %s, which prevResult does not give the container (%s)", ip, t, givenOfFamily(container, t))
		}
	}
	for _, r := range rec.Steering.Egress {
		if !gives(r.Source) {
			return driftf("%s: egress rule SNATs the flows of %s, which prevResult does not give the container (%s)", r.IP, r.Source, givenOfFamily(container, r.Source))
		}
	}
	return nil
}

// givenOfFamily lists the container's addresses of a's family, for a
// message.
func givenOfFamily(container []netip.Prefix, a netip.Addr) string {
	fam := "IPv4"
	if a.Is6() {
		fam = "IPv6"
	}
	var out []string
	for _, p := range container {
		if p.Addr().Is4() == a.Is4() {
			out = append(out, p.Addr().String())
		}
	}
	if len(out) == 0 {
		return "it gives no " + fam + " address"
	}
	return "its " + fam + " addresses: " + strings.Join(out, ", ")
}

// checkIngress fails when an IP of s does not steer to s's target, or
// also steers to a target that none of the IP's holders has: a share of
// the new flows would go elsewhere. Another holder's missing target is
// that holder's drift.
func checkIngress(s *store.Steering, diffs []IngressDiff) error {
	for _, x := range diffs {
		t, _ := Target(s, x.IP)
		if !slices.Contains(x.Got, t) {
			return driftf("%s: no ingress rule to %s in table inet %s (it steers to %v)", x.IP, t, nat.TableName, x.Got)
		}
		for _, g := range x.Got {
			if !slices.Contains(x.Want, g) {
				return driftf("%s: ingress rule also steers to %s, which no holder has, in table inet %s", x.IP, g, nat.TableName)
			}
		}
	}
	return nil
}

// checkEgressUplinks fails when an egress rule of s names an uplink its
// IP no longer leaves by (re-homed since): the flows take the new uplink,
// which the rule does not match.
func checkEgressUplinks(s *store.Steering, uplinkOf func(netip.Addr) (string, error)) error {
	for _, r := range s.Egress {
		up, err := uplinkOf(r.IP)
		if err != nil {
			return err
		}
		// An index with no uplink (lost, not yet recovered) tells nothing.
		if up != "" && up != r.Uplink {
			return driftf("%s: egress rule from %s names uplink %s, but %s now leaves via %s", r.Source, r.IP, r.Uplink, r.IP, up)
		}
	}
	return nil
}

// StrayFlows are the flows to ip DNATed to a stray rule's targets. Only
// an IP no record holds loses every flow: one held for egress alone
// carries the container's flows SNATed from it, which must live on.
func StrayFlows(ip netip.Addr, targets []netip.Addr, held bool) []Gone {
	if !held {
		return []Gone{{IP: ip}}
	}
	var out []Gone
	for _, t := range targets {
		out = append(out, Gone{ip, t})
	}
	return out
}
