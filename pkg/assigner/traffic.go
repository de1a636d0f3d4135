package assigner

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
)

// NAT is what the assigner asks of the host's nftables table and
// conntrack (package nat); tests give a fake.
type NAT interface {
	// Apply makes one attachment's change in one transaction.
	Apply(ch nat.Change) error
	SetIngress(ip netip.Addr, targets []netip.Addr) error
	SetEgress(k nat.EgressKey, ip netip.Addr) error
	DelEgress(k nat.EgressKey) error
	SetHairpin(subnet netip.Prefix) error
	DelHairpin(subnet netip.Prefix) error
	Read() (*nat.State, error)
	Ensure() error
	Probe() error
	// Forget deletes the conntrack entries of flows to ip DNATed to
	// target, or, with no target, every entry our rules made for ip.
	Forget(ip, target netip.Addr) error
	// Tracked says whether the node has any conntrack entry at all.
	Tracked() (bool, error)
}

// steersIngress says whether s steers the flows to its IPs.
func steersIngress(s *steering) bool {
	return s != nil && nat.Traffic(s.Traffic).Ingress()
}

// egressOf is s's egress rules; none for no steering.
func egressOf(s *steering) []egressRule {
	if s == nil {
		return nil
	}
	return s.Egress
}

// steersEgress says whether s steers the flows its holder sends.
func steersEgress(s *steering) bool {
	return s != nil && nat.Traffic(s.Traffic).Egress()
}

// targetOf is the container address that flows to ip go to: the first of
// ip's family.
func targetOf(s *steering, ip netip.Addr) (netip.Addr, bool) {
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

// steers tells whether this invocation makes NAT rules for its ADD.
func (a *Assigner) steers() bool {
	return a.opts.NAT != nil && a.opts.Traffic.Steers()
}

// screenContainer refuses steering when prevResult names, as the
// container's, an address the node itself holds (a gateway address, the
// node's own): the rules would DNAT the external IP to the node and SNAT
// the node's own flows from that address to the external IP.
func (a *Assigner) screenContainer() error {
	if !a.steers() {
		return nil
	}
	for _, c := range a.opts.Container {
		r, err := a.k.lookup(c.Addr())
		if err != nil {
			return err
		}
		if r.local != 0 {
			return Errorf(ErrRefused, "traffic: prevResult gives the container %s, an address of the node's own %s", c.Addr(), a.k.linkName(r.local))
		}
	}
	return nil
}

// newSteering decides an ADD's rules: egress from each container address
// through each uplink of its family's IPs, from the first such IP in
// request order; and a hairpin rule per target, from its own subnet.
func (a *Assigner) newSteering(ips []netip.Addr, placed []Placed) *steering {
	if !a.steers() {
		return nil
	}
	s := &steering{Traffic: string(a.opts.Traffic), Container: a.opts.Container}
	uplinks := map[netip.Addr]string{}
	var order []netip.Addr
	for _, p := range placed {
		uplinks[p.Addr] = p.Uplink.Name
		order = append(order, p.Addr)
	}
	s.Egress = egressVia(s, order, uplinks)
	if steersIngress(s) {
		for _, ip := range ips {
			if t, ok := targetOf(s, ip); ok && !slices.ContainsFunc(s.Hairpin, func(h hairpinRule) bool { return h.Target == t }) {
				s.Hairpin = append(s.Hairpin, hairpinRule{Source: prefixOf(s, t).Masked(), Target: t})
			}
		}
	}
	return s
}

// egressVia is s's egress: from each container address through the
// uplink of each IP of its family, from the first such IP in ips' order.
func egressVia(s *steering, ips []netip.Addr, uplinks map[netip.Addr]string) []egressRule {
	if !steersEgress(s) {
		return nil
	}
	var out []egressRule
	seen := map[nat.EgressKey]bool{}
	for _, ip := range ips {
		for _, c := range s.Container {
			k := nat.EgressKey{Source: c.Addr(), Uplink: uplinks[ip]}
			if c.Addr().Is4() == ip.Is4() && k.Uplink != "" && !seen[k] {
				seen[k] = true
				out = append(out, egressRule{Source: k.Source, Uplink: k.Uplink, IP: ip})
			}
		}
	}
	return out
}

// prefixOf is the prefix s has for its container address a.
func prefixOf(s *steering, a netip.Addr) netip.Prefix {
	for _, c := range s.Container {
		if c.Addr() == a {
			return c
		}
	}
	return netip.PrefixFrom(a, a.BitLen())
}

// steer makes the table match the records after a change of attachment
// key (or its undo): the attachment's own egress and hairpin rules, and
// the ingress targets of every IP the change touched. was lists the
// attachment's steering as the change's journal knows it, before and
// after; what the record now has is kept, the rest removed. Each step is
// idempotent, so a replay after a crash finishes it.
func (a *Assigner) steer(j *journal, w *written) error {
	if a.opts.NAT == nil {
		return nil
	}
	touch, was := j.Touch, natWas(j)
	// apply has just written j.Record as the attachment's record (or
	// removed it), so it is what the record says now.
	var now *steering
	if j.Record != nil {
		now = j.Record.Steering
	}
	if now == nil && !anySteering(was) {
		return nil
	}
	a.step("nat")
	want, leaving, holders, err := a.leaving(touch, was, w)
	if err != nil {
		return err
	}
	ch := ownChange(now, was)
	ch.Fresh = freshChains(j, holders)
	// An attachment that steers from now on relies on the base chains.
	ch.EnsureBase = now != nil
	if err := a.keepSharedHairpins(&ch); err != nil {
		return err
	}
	for i, ip := range touch {
		ch.Ingress[ip] = want[i]
	}
	if err := a.opts.NAT.Apply(ch); err != nil {
		return err // a replay queues the leaving flows once it applies
	}
	err = a.routeChange(j, was, want, w)
	a.queueForget(leaving)
	return err
}

// keepSharedHairpins drops the hairpin subnets ch would remove. A subnet
// is shared by every attachment on it, and finding out whether one still
// is would read every record; one left behind steers nothing (no flow is
// DNATed into it), costs nothing to add again (the next ADD on the subnet
// finds it), and saves that ADD and this DEL a rebuild of the interval
// set (figure: docs/performance.md, "Figures behind design choices").
// GC removes the subnets that no record has. Only the
// undoing of a failed ADD removes them, when the node then holds nothing,
// so that a failed ADD leaves no trace on an otherwise empty node.
func (a *Assigner) keepSharedHairpins(ch *nat.Change) error {
	if len(ch.DelHairpin) == 0 {
		return nil
	}
	if !a.undoing {
		ch.DelHairpin = nil
		return nil
	}
	held, err := a.st.AnyIndexed()
	if held {
		ch.DelHairpin = nil
	}
	return err
}

func anySteering(ss []*steering) bool {
	return slices.ContainsFunc(ss, func(s *steering) bool { return s != nil })
}

// ownChange keeps the attachment's egress rules as its record has them
// now and removes those of what it was. Hairpin subnets are shared by
// every attachment on the subnet: steer keeps those ch would remove (see
// keepSharedHairpins), and GC removes them once no record has them.
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

// gone is a target whose flows to ip are to be forgotten; with no target,
// every flow of ip.
type gone struct{ ip, target netip.Addr }

// leaving reads each touched IP's targets from its holders' records, and
// lists the targets that left and the IPs that nobody holds any more.
// Their conntrack entries are deleted once the table no longer steers to
// them (queued, then deleted off the lock: forget.go): deleted before, a
// new flow in between would be DNATed to the leaving target again, and
// its entry, kept alive by the client's retransmissions, would black-hole
// it for minutes.
func (a *Assigner) leaving(touch []netip.Addr, was []*steering, w *written) ([][]netip.Addr, []gone, map[netip.Addr][]string, error) {
	want := make([][]netip.Addr, len(touch))
	var out []gone
	holders := map[netip.Addr][]string{}
	for i, ip := range touch {
		targets, hs, err := a.targets(ip, w)
		if err != nil {
			return nil, nil, nil, err
		}
		want[i], holders[ip] = targets, hs
		held := len(hs) > 0
		if !held {
			out = append(out, gone{ip: ip})
		}
		for _, old := range was {
			if t, ok := targetOf(old, ip); held && ok && !slices.Contains(targets, t) && !slices.Contains(out, gone{ip, t}) {
				out = append(out, gone{ip, t})
			}
		}
	}
	return want, out, holders, nil
}

// written is what apply has just stored for one change: the touched IPs'
// holders (an IP nobody holds now has none) and the attachment's record.
// steer reads them from here, not back from the files: decoding them would
// be the first use of encoding/json's decoders for the index and record
// types in this process, on every steered ADD (figure: docs/performance.md,
// "Figures behind design choices").
type written struct {
	key     string
	record  *record
	holders map[netip.Addr][]string
	// uplinks is each touched IP's uplink as its index had it, also of an
	// IP the change released (whose index it cleared).
	uplinks map[netip.Addr]string
}

// holdersOf is ip's holders as w has them, or from ip's index entry.
func (a *Assigner) holdersOf(ip netip.Addr, w *written) ([]string, error) {
	if w != nil {
		if hs, ok := w.holders[ip]; ok {
			return hs, nil
		}
	}
	e, err := a.st.ReadIP(ip)
	return e.Holders, err
}

// recordOf is key's record as w has it, or from its file; nil if none.
func (a *Assigner) recordOf(key string, w *written) (*record, error) {
	if w != nil && key == w.key {
		return w.record, nil
	}
	return a.st.ReadRecord(key)
}

// targets reads ip's holders and each holder's target from its record,
// taking what w has over the files (w may be nil): O(holders of ip),
// never a walk of every record.
func (a *Assigner) targets(ip netip.Addr, w *written) ([]netip.Addr, []string, error) {
	holders, err := a.holdersOf(ip, w)
	if err != nil {
		return nil, nil, err
	}
	var out []netip.Addr
	for _, key := range holders {
		r, err := a.recordOf(key, w)
		if err != nil {
			return nil, nil, err
		}
		if r == nil {
			continue
		}
		if t, ok := targetOf(r.Steering, ip); ok && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, holders, nil
}
