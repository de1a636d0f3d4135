package assigner

// The steering decisions, as pure functions of the records and the
// change: what an ADD's record keeps (decideSteering), what a change of
// attachment does to the table and which flows it leaves behind
// (planSteer), and how re-homed IPs move other holders' egress
// (movedEgress). They read no file and touch no kernel; traffic.go reads
// what they need and applies what they return as the journal's "nat" step.

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// decideSteering is what an ADD's record keeps so that its rules can be
// made, checked and removed: egress from each container address through
// each uplink of its family's IPs, from the first such IP in request
// order; and a hairpin rule per target, from its own subnet. It is nil
// when traffic steers nothing.
func decideSteering(traffic traffic.Mode, container []netip.Prefix, ips []netip.Addr, placed []Placed) *steering {
	if !traffic.Steers() {
		return nil
	}
	s := &steering{Traffic: string(traffic), Container: container}
	uplinks := map[netip.Addr]string{}
	var order []netip.Addr
	for _, p := range placed {
		uplinks[p.Addr] = p.Uplink.Name
		order = append(order, p.Addr)
	}
	s.Egress = egressVia(s, order, uplinks)
	for _, ip := range ips {
		if t, ok := targetOf(s, ip); ok && !slices.ContainsFunc(s.Hairpin, func(h hairpinRule) bool { return h.Target == t }) {
			s.Hairpin = append(s.Hairpin, hairpinRule{Source: prefixOf(s, t).Masked(), Target: t})
		}
	}
	return s
}

// heldBy is one holder of an IP: its record's key and steering (nil for
// a record that steers nothing, or none).
type heldBy struct {
	key string
	s   *steering
}

// ingressTargets is where new flows to ip go: each holder's target, in
// the holders' order, once each.
func ingressTargets(ip netip.Addr, holders []heldBy) []netip.Addr {
	var out []netip.Addr
	for _, h := range holders {
		if t, ok := targetOf(h.s, ip); ok && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// steerChange is what the journal's "nat" step knows of one change of
// attachment (or its undo).
type steerChange struct {
	touch []netip.Addr // the IPs the change touched
	now   *steering    // the attachment's steering after it; nil once released
	// was lists every steering the change knows the attachment had or was
	// given (journal.natWas): their rules go unless now has them.
	was []*steering
	// holders is each touched IP's holders after the change, in index order.
	holders map[netip.Addr][]heldBy
	// fresh marks the IPs whose ingress this change makes, not rewrites
	// (journal.fresh, nat.Change.Fresh).
	fresh map[netip.Addr]bool
	// keepHairpins keeps the hairpin subnets the change would remove (see
	// keepSharedHairpins).
	keepHairpins bool
}

// steerPlan is what the "nat" step does: one table change, each touched
// IP's targets after it (in touch's order), and the flows to forget once
// the table no longer steers to them.
type steerPlan struct {
	change  nat.Change
	targets [][]netip.Addr
	leaving []gone
}

// planSteer decides a change's table change: the attachment's own egress
// and hairpin rules as now has them, and the ingress targets of every IP
// the change touched, from all its holders. Applying it is idempotent, so
// a replay after a crash finishes it.
func planSteer(c steerChange) steerPlan {
	p := steerPlan{change: ownChange(c.now, c.was), targets: make([][]netip.Addr, len(c.touch))}
	p.change.Fresh = c.fresh
	// An attachment that steers from now on relies on the base chains.
	p.change.EnsureBase = c.now != nil
	if c.keepHairpins {
		p.change.DelHairpin = nil
	}
	for i, ip := range c.touch {
		p.targets[i] = ingressTargets(ip, c.holders[ip])
		p.change.Ingress[ip] = p.targets[i]
		for _, g := range leavingFlows(ip, p.targets[i], len(c.holders[ip]) > 0, c.was) {
			if !slices.Contains(p.leaving, g) {
				p.leaving = append(p.leaving, g)
			}
		}
	}
	return p
}

// gone is a target whose flows to ip are to be forgotten; with no target,
// every flow of ip.
type gone struct{ ip, target netip.Addr }

// leavingFlows is what a change leaves of ip's flows: all of them when
// nobody holds ip any more, else those to each target the attachment had
// that ip no longer steers to. Their conntrack entries are deleted once
// the table no longer steers to them (queued, then deleted off the lock:
// forget.go): deleted before, a new flow in between would be DNATed to
// the leaving target again, and its entry, kept alive by the client's
// retransmissions, would black-hole it for minutes.
func leavingFlows(ip netip.Addr, targets []netip.Addr, held bool, was []*steering) []gone {
	if !held {
		return []gone{{ip: ip}}
	}
	var out []gone
	for _, old := range was {
		if t, ok := targetOf(old, ip); ok && !slices.Contains(targets, t) && !slices.Contains(out, gone{ip, t}) {
			out = append(out, gone{ip, t})
		}
	}
	return out
}

// ownChange keeps the attachment's egress rules as its record has them
// now and removes those of what it was. Hairpin subnets are shared by
// every attachment on the subnet: planSteer keeps those ch would remove
// (see keepSharedHairpins), and GC removes them once no record has them.
func ownChange(now *steering, was []*steering) nat.Change {
	ch := nat.Change{Ingress: map[netip.Addr][]netip.Addr{}, Egress: map[nat.EgressKey]netip.Addr{}}
	for _, old := range was {
		if old == nil {
			continue
		}
		for _, r := range old.Egress {
			if now == nil || !slices.ContainsFunc(now.Egress, func(e egressRule) bool { return e.Source == r.Source && e.Uplink == r.Uplink }) {
				ch.DelEgress = append(ch.DelEgress, nat.EgressKey{Source: r.Source, Uplink: r.Uplink})
			}
		}
		for _, h := range old.Hairpin {
			ch.DelHairpin = append(ch.DelHairpin, h.Source.Masked())
		}
	}
	if now != nil {
		for _, r := range now.Egress {
			ch.Egress[nat.EgressKey{Source: r.Source, Uplink: r.Uplink}] = r.IP
		}
		for _, h := range now.Hairpin {
			ch.Hairpin = append(ch.Hairpin, h.Source.Masked())
		}
	}
	ch.DelEgress = slices.Compact(ch.DelEgress)
	ch.DelHairpin = slices.DeleteFunc(slices.Compact(ch.DelHairpin), func(p netip.Prefix) bool { return slices.Contains(ch.Hairpin, p) })
	return ch
}

// movedEgress is the change that moves each record's egress rules from
// what was has to what now has (followReHomed: the uplink of an IP they
// leave from was chosen anew). A key that another record now has stays:
// Apply deletes after it sets.
func movedEgress(was, now map[string][]egressRule) nat.Change {
	ch := nat.Change{Egress: map[nat.EgressKey]netip.Addr{}}
	for _, key := range slices.Sorted(maps.Keys(now)) {
		if slices.Equal(now[key], was[key]) {
			continue
		}
		moved := ownChange(&steering{Egress: now[key]}, []*steering{{Egress: was[key]}})
		ch.DelEgress = append(ch.DelEgress, moved.DelEgress...)
		maps.Copy(ch.Egress, moved.Egress)
	}
	ch.DelEgress = slices.DeleteFunc(ch.DelEgress, func(k nat.EgressKey) bool { _, kept := ch.Egress[k]; return kept })
	return ch
}
