package assigner

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/steer"
)

// NAT is what the assigner asks of the host's nftables table and
// conntrack: the steering's table (steer.NAT) and the conntrack clean-up's
// side of it; steer.HostTable is the host's, tests give a fake.
type NAT interface {
	steer.NAT
	// Forget deletes the conntrack entries of flows to ip DNATed to
	// target, or, with no target, every entry our rules made for ip.
	Forget(ip, target netip.Addr) error
	// StartPass says that the Forgets to come were all queued before now
	// (one pass of Drain), so that they may share the walks they make.
	StartPass()
	// Tracked says whether the node has any conntrack entry at all.
	Tracked() (bool, error)
	// Seen says whether our rules recorded a flow NATed for addr: an
	// external IP DNATed to a target, or a container address SNATed.
	Seen(addr netip.Addr) (bool, error)
	// Unsee forgets that addrs had flows, once their clean-up is done.
	Unsee(addrs []netip.Addr) error
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
		r, err := a.k.Lookup(c.Addr())
		if err != nil {
			return err
		}
		if r.Local != 0 {
			return Errorf(ErrRefused, "traffic: prevResult gives the container %s, an address of the node's own %s", c.Addr(), a.k.LinkName(r.Local))
		}
	}
	return nil
}

// newSteering is an ADD's steering (steer.Decide), when it steers.
func (a *Assigner) newSteering(ips []netip.Addr, placed []Placed) *steering {
	if !a.steers() {
		return nil
	}
	uplinks := map[netip.Addr]string{}
	for _, p := range placed {
		uplinks[p.Addr] = p.Uplink.Name
	}
	return steer.Decide(a.opts.Traffic, a.opts.Container, ips, uplinks)
}

// steer is the journal's "nat" step: it reads what steer.PlanChange needs
// (the touched IPs' holders and their steering), makes sure of the
// uplinks' marks and routes the change needs (routeChange), applies the
// plan and the uplink sets' members in one transaction, with the uplink
// chains it may empty (the kernel refuses it while one still has a
// member, and the chains are then read again), then takes away the routes
// of the chains gone (uplinkroute.Router.Settle) and queues the conntrack
// clean-up of the flows that left.
func (a *Assigner) steer(j *journal, w *written) error {
	if a.opts.NAT == nil {
		return nil
	}
	c := steer.Change{Touch: j.Touch, Was: natWas(j)}
	// apply has just written j.Record as the attachment's record (or
	// removed it), so it is what the record says now.
	if j.Record != nil {
		c.Now = j.Record.Steering
	}
	if c.Now == nil && !anySteering(c.Was) {
		return nil
	}
	a.step("nat")
	var err error
	if c.Holders, err = a.holdings(c.Touch, w); err != nil {
		return err
	}
	c.Fresh = freshChains(j, holderKeys(c.Holders))
	if c.KeepHairpins, err = a.keepSharedHairpins(); err != nil {
		return err
	}
	p := steer.PlanChange(c)
	r, err := a.routeChange(j, c.Was, p.Targets, w)
	if err != nil {
		return err
	}
	var unmarked bool
	r.Into(&p.Change, &unmarked)
	if err := a.opts.NAT.Apply(p.Change); err != nil {
		return err // a replay queues the leaving flows once it applies
	}
	if a.router != nil {
		err = a.router.Settle(r, p.Change)
	}
	a.queue.Leaving(p.Leaving, p.Change.DelEgress)
	return err
}

// keepSharedHairpins says whether a change keeps the hairpin subnets it
// would remove. A subnet is shared by every attachment on it, and finding
// out whether one still is would read every record; one left behind
// steers nothing (no flow is DNATed into it), costs nothing to add again
// (the next ADD on the subnet finds it), and saves that ADD and this DEL a
// rebuild of the interval set (figure: docs/performance.md, "Figures
// behind design choices"). GC removes the subnets that no record has. Only
// the undoing of a failed ADD removes them, when the node then holds
// nothing, so that a failed ADD leaves no trace on an otherwise empty node.
func (a *Assigner) keepSharedHairpins() (bool, error) {
	if !a.undoing {
		return true, nil
	}
	return a.st.AnyIndexed()
}

func anySteering(ss []*steering) bool {
	return slices.ContainsFunc(ss, func(s *steering) bool { return s != nil })
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

// holdings reads each of ips' holders and its steering from its record,
// taking what w has over the files (w may be nil): O(holders of the IPs),
// never a walk of every record.
func (a *Assigner) holdings(ips []netip.Addr, w *written) (map[netip.Addr][]steer.HeldBy, error) {
	out := map[netip.Addr][]steer.HeldBy{}
	for _, ip := range ips {
		keys, err := a.holdersOf(ip, w)
		if err != nil {
			return nil, err
		}
		hs := make([]steer.HeldBy, 0, len(keys))
		for _, key := range keys {
			r, err := a.recordOf(key, w)
			if err != nil {
				return nil, err
			}
			h := steer.HeldBy{Key: key}
			if r != nil {
				h.Steering = r.Steering
			}
			hs = append(hs, h)
		}
		out[ip] = hs
	}
	return out, nil
}

func holderKeys(hs map[netip.Addr][]steer.HeldBy) map[netip.Addr][]string {
	out := make(map[netip.Addr][]string, len(hs))
	for ip, h := range hs {
		keys := make([]string, len(h))
		for i := range h {
			keys[i] = h[i].Key
		}
		out[ip] = keys
	}
	return out
}
