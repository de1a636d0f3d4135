package steer

// What a change of attachment does to the table and which flows it
// leaves behind (PlanChange), and how re-homed IPs move other holders'
// egress (MovedEgress): pure functions of the records and the change.
// They read no file and touch no kernel; package assigner reads what they
// need and applies what they return as the journal's "nat" step.

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/nat/intervals"
	"github.com/external-ip/external-ip/pkg/store"
)

// HeldBy is one holder of an IP: its record's key and steering (nil for
// a record that steers nothing, or none).
type HeldBy struct {
	Key      string
	Steering *store.Steering
}

// IngressTargets is where new flows to ip go: each holder's target, in
// the holders' order, once each.
func IngressTargets(ip netip.Addr, holders []HeldBy) []netip.Addr {
	var out []netip.Addr
	for _, h := range holders {
		if t, ok := Target(h.Steering, ip); ok && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// Change is what the journal's "nat" step knows of one change of
// attachment (or its undo).
type Change struct {
	Touch []netip.Addr    // the IPs the change touched
	Now   *store.Steering // the attachment's steering after it; nil once released
	// Was lists every steering the change knows the attachment had or was
	// given (the assigner's natWas): their rules go unless Now has them.
	Was []*store.Steering
	// Holders is each touched IP's holders after the change, in index order.
	Holders map[netip.Addr][]HeldBy
	// Fresh marks the IPs whose ingress this change makes, not rewrites
	// (the assigner's freshChains, nat.Change.Fresh).
	Fresh map[netip.Addr]bool
	// KeepShared keeps the hairpin subnets and exclusion elements the
	// change would remove: each is shared by every attachment on its
	// subnet, and GC removes those no record needs (see the assigner's
	// keepSharedHairpins).
	KeepShared bool
}

// Plan is what the "nat" step does: one table change, each touched
// IP's targets after it (in Touch's order), and the flows to forget once
// the table no longer steers to them.
type Plan struct {
	Change  nat.Change
	Targets [][]netip.Addr
	Leaving []Gone
}

// PlanChange decides a change's table change: the attachment's own egress
// and hairpin rules as Now has them, and the ingress targets of every IP
// the change touched, from all its holders. Applying it is idempotent, so
// a replay after a crash finishes it.
func PlanChange(c Change) Plan {
	p := Plan{Change: ownChange(c.Now, c.Was), Targets: make([][]netip.Addr, len(c.Touch))}
	p.Change.Fresh = c.Fresh
	// An attachment that steers from now on relies on the base chains.
	p.Change.EnsureBase = c.Now != nil
	if c.KeepShared {
		p.Change.DelHairpin, p.Change.DelExclude = nil, nil
	}
	p.Change.DelEgress = slices.DeleteFunc(p.Change.DelEgress, func(k nat.EgressKey) bool { return HasEgress(c.Holders, k.Source, k.Uplink) })
	for i, ip := range c.Touch {
		p.Targets[i] = IngressTargets(ip, c.Holders[ip])
		p.Change.Ingress[ip] = p.Targets[i]
		for _, g := range leavingFlows(ip, p.Targets[i], len(c.Holders[ip]) > 0, c.Was) {
			if !slices.Contains(p.Leaving, g) {
				p.Leaving = append(p.Leaving, g)
			}
		}
	}
	return p
}

// HasEgress says whether a holder in holders has an egress rule from
// source, via uplink when one is named. Attachments whose container
// address is the same (overlapping container subnets across networks)
// share its rule, keyed by address and uplink, and leave from the same IP
// (the ADD refuses another): the rule's other records then hold that IP,
// so the holders of the change's IPs are all that can still need it.
func HasEgress(holders map[netip.Addr][]HeldBy, source netip.Addr, uplink string) bool {
	for _, hs := range holders {
		for _, h := range hs {
			if slices.ContainsFunc(EgressOf(h.Steering), func(e store.EgressRule) bool {
				return e.Source == source && (uplink == "" || e.Uplink == uplink)
			}) {
				return true
			}
		}
	}
	return false
}

// Gone is a target whose flows to ip are to be forgotten; with no target,
// every flow of ip.
type Gone struct{ IP, Target netip.Addr }

// leavingFlows is what a change leaves of ip's flows: all of them when
// nobody holds ip any more, else those to each target the attachment had
// that ip no longer steers to. Their conntrack entries are deleted once
// the table no longer steers to them (queued, then deleted off the lock:
// package forget): deleted before, a new flow in between would be DNATed to
// the leaving target again, and its entry, kept alive by the client's
// retransmissions, would black-hole it for minutes.
func leavingFlows(ip netip.Addr, targets []netip.Addr, held bool, was []*store.Steering) []Gone {
	if !held {
		return []Gone{{IP: ip}}
	}
	var out []Gone
	for _, old := range was {
		if t, ok := Target(old, ip); ok && !slices.Contains(targets, t) && !slices.Contains(out, Gone{ip, t}) {
			out = append(out, Gone{ip, t})
		}
	}
	return out
}

// ownChange keeps the attachment's egress rules as its record has them
// now and removes those of what it was. Hairpin subnets are shared by
// every attachment on the subnet, and so are exclusion elements:
// PlanChange keeps those ch would remove (Change.KeepShared), and GC
// removes them once no record has them.
func ownChange(now *store.Steering, was []*store.Steering) nat.Change {
	ch := nat.Change{Ingress: map[netip.Addr][]netip.Addr{}, Egress: map[nat.EgressKey]netip.Addr{}}
	for _, old := range was {
		if old == nil {
			continue
		}
		for _, r := range old.Egress {
			if now == nil || !slices.ContainsFunc(now.Egress, func(e store.EgressRule) bool { return e.Source == r.Source && e.Uplink == r.Uplink }) {
				ch.DelEgress = append(ch.DelEgress, nat.EgressKey{Source: r.Source, Uplink: r.Uplink})
			}
		}
		for _, h := range old.Hairpin {
			ch.DelHairpin = append(ch.DelHairpin, h.Source.Masked())
		}
		ch.DelExclude = append(ch.DelExclude, ExclusionsOf(old)...)
	}
	if now != nil {
		for _, r := range now.Egress {
			ch.Egress[nat.EgressKey{Source: r.Source, Uplink: r.Uplink}] = r.IP
		}
		for _, h := range now.Hairpin {
			ch.Hairpin = append(ch.Hairpin, h.Source.Masked())
		}
		ch.Exclude = ExclusionsOf(now)
	}
	ch.DelEgress = slices.Compact(ch.DelEgress)
	ch.DelHairpin = slices.DeleteFunc(slices.Compact(ch.DelHairpin), func(p netip.Prefix) bool { return slices.Contains(ch.Hairpin, p) })
	slices.SortFunc(ch.DelExclude, intervals.Compare)
	ch.DelExclude = slices.DeleteFunc(slices.Compact(ch.DelExclude), func(p intervals.Pair) bool { return slices.Contains(ch.Exclude, p) })
	return ch
}

// MovedEgress is the change that moves each record's egress rules from
// what was has to what now has (the assigner's followReHomed: the uplink
// of an IP they leave from was chosen anew). A key that another record now
// has stays:
// Apply deletes after it sets.
func MovedEgress(was, now map[string][]store.EgressRule) nat.Change {
	ch := nat.Change{Egress: map[nat.EgressKey]netip.Addr{}}
	for _, key := range slices.Sorted(maps.Keys(now)) {
		if slices.Equal(now[key], was[key]) {
			continue
		}
		moved := ownChange(&store.Steering{Egress: now[key]}, []*store.Steering{{Egress: was[key]}})
		ch.DelEgress = append(ch.DelEgress, moved.DelEgress...)
		maps.Copy(ch.Egress, moved.Egress)
	}
	ch.DelEgress = slices.DeleteFunc(ch.DelEgress, func(k nat.EgressKey) bool { _, kept := ch.Egress[k]; return kept })
	return ch
}
