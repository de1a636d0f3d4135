package assigner

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/forget"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// NAT is what the assigner asks of the host's nftables table and
// conntrack: the steering's table (steer.NAT) and the conntrack clean-up's
// side of it (forget.Conntrack); steer.HostTable is the host's, tests give
// a fake.
type NAT interface {
	steer.NAT
	forget.Conntrack
}

// steers tells whether this invocation makes NAT rules for its ADD.
func (a *Assigner) steers() bool {
	return a.opts.NAT != nil && a.opts.Traffic.Steers()
}

// steer is the journal's "nat" step: it reads what steer.PlanChange needs
// (the touched IPs' holders and their steering), makes sure of the
// uplinks' marks and routes the change needs (routeChange), applies the
// plan and the uplink sets' members in one transaction, with the uplink
// chains it may empty (the kernel refuses it while one still has a
// member, and the chains are then read again), then takes away the routes
// of the chains gone (uplinkroute.Router.Settle) and queues the conntrack
// clean-up of the flows that left. A change that made the table anew
// gives back every attachment's rules (restoreTable).
func (c *change) steer(w *written) error {
	if c.opts.NAT == nil {
		return nil
	}
	j := c.j
	sc := steer.Change{Touch: slices.DeleteFunc(slices.Clone(j.Touch), func(ip netip.Addr) bool { return c.quiet[ip] }), Was: j.Steerings()}
	// apply has just written j.Record as the attachment's record (or
	// removed it), so it is what the record says now.
	if j.Record != nil {
		sc.Now = j.Record.Steering
	}
	if sc.Now == nil && !anySteering(sc.Was) {
		return nil
	}
	c.step("nat")
	var err error
	if sc.Holders, err = w.holdings(sc.Touch); err != nil {
		return err
	}
	sc.Fresh = freshChains(j, holderKeys(sc.Holders))
	if sc.KeepShared, err = c.keepSharedHairpins(); err != nil {
		return err
	}
	p := steer.PlanChange(sc)
	defer c.router.Release() // the node lock, if the routing took it
	r, err := c.routeChange(sc, p.Targets, w)
	if err != nil {
		return err
	}
	var unmarked, remade bool
	r.Into(&p.Change, &unmarked)
	p.Change.Remade = &remade
	if err := c.opts.NAT.Apply(p.Change); err != nil {
		return err // a replay queues the leaving flows once it applies
	}
	if c.router != nil {
		err = c.router.Settle(r, p.Change)
	}
	c.queue.Leaving(p.Leaving, p.Change.DelEgress)
	if remade {
		c.restoreTable()
	}
	return err
}

// routeChange routes, before the NAT step's transaction, what the
// attachment's steering needs now (uplinkroute.Router.Change); want is
// each touched IP's targets after the change (sc.Touch's); an uplink-eg member another holder still needs stays.
// Routes left without a chain are looked for only after a fault (mode.afterFault).
func (c *change) routeChange(sc steer.Change, want [][]netip.Addr, w *written) (uplinkroute.Plan, error) {
	if c.router == nil {
		return uplinkroute.Plan{}, nil
	}
	var now []uplinkroute.Need
	if c.j.Record != nil {
		now = uplinkroute.Needs(c.j.Record.Steering, c.j.Record.IPs, w.uplinks)
	}
	leave := slices.DeleteFunc(uplinkroute.Leaving(sc.Touch, sc.Was, want, now, w.uplinks), func(n uplinkroute.Need) bool {
		return n.Egress && steer.HasEgress(sc.Holders, n.Addr, n.Uplink)
	})
	return c.router.Change(uplinkroute.Change{Now: now, Leave: leave, AfterFault: c.mode.afterFault()})
}

// keepSharedHairpins says whether a change keeps the hairpin subnets (and
// the exclusion elements, keyed by subnet too) it would remove. A subnet is shared by every attachment on it, and finding
// out whether one still is would read every record; one left behind
// steers nothing (no flow is DNATed into it), costs nothing to add again
// (the next ADD on the subnet finds it), and saves that ADD and this DEL a
// rebuild of the interval set (figure: docs/performance.md, "Figures
// behind design choices"). GC removes the subnets that no record has. Only
// the undoing of a failed ADD removes them, when the node then holds
// nothing, so that a failed ADD leaves no trace on an otherwise empty node.
func (c *change) keepSharedHairpins() (bool, error) {
	if !c.mode.dropsSharedHairpins() {
		return true, nil
	}
	return c.st.AnyIndexed()
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
	st      *store.Store
	key     string
	record  *record
	holders map[netip.Addr][]string
	// uplinks is each touched IP's uplink as its index had it, also of an
	// IP the change released (whose index it cleared).
	uplinks map[netip.Addr]string
}

// onDisk is a written of no change: what holdings reads comes from the
// files alone.
func onDisk(st *store.Store) *written { return &written{st: st} }

// holdersOf is ip's holders as w has them, or from ip's index entry.
func (w *written) holdersOf(ip netip.Addr) ([]string, error) {
	if hs, ok := w.holders[ip]; ok {
		return hs, nil
	}
	e, err := w.st.ReadIP(ip)
	return e.Holders, err
}

// recordOf is key's record as w has it, or from its file; nil if none.
func (w *written) recordOf(key string) (*record, error) {
	if w.key != "" && key == w.key {
		return w.record, nil
	}
	return w.st.ReadRecord(key)
}

// holdings reads each of ips' holders and its steering from its record,
// taking what w has over the files: O(holders of the IPs), never a walk
// of every record.
func (w *written) holdings(ips []netip.Addr) (map[netip.Addr][]steer.HeldBy, error) {
	out := map[netip.Addr][]steer.HeldBy{}
	for _, ip := range ips {
		keys, err := w.holdersOf(ip)
		if err != nil {
			return nil, err
		}
		hs := make([]steer.HeldBy, 0, len(keys))
		for _, key := range keys {
			r, err := w.recordOf(key)
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
