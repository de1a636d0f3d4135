package assigner

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// The uplink routing of a change, and of GC, CHECK and status: what the
// records need is read here (the index has each IP's uplink), decided and
// made by package uplinkroute.

// wantRouting is every routed need of the records, each IP's uplink
// from its index entry.
func (a *Assigner) wantRouting(recs map[string]*record) ([]uplinkroute.Need, error) {
	var out []uplinkroute.Need
	for _, key := range slices.Sorted(maps.Keys(recs)) {
		ns, err := a.recordNeeds(recs[key])
		if err != nil {
			return nil, err
		}
		for _, n := range ns {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func (a *Assigner) recordNeeds(r *record) ([]uplinkroute.Need, error) {
	if r.Steering == nil {
		return nil, nil
	}
	uplinkOf, err := a.uplinksOf(r, nil)
	if err != nil {
		return nil, err
	}
	return a.router.Routed(uplinkroute.Needs(r.Steering, r.IPs, uplinkOf), nil)
}

// readRouting is the routing of ours as the kernel has it, another
// state's members told apart: an external IP that may be another holder
// device's (host.Holder.MayOwn, with this state's index), or a container
// address whose egress rule is from such an IP.
func (a *Assigner) readRouting() (*uplinkroute.View, error) {
	v, err := a.router.Read()
	if err != nil {
		return nil, err
	}
	known, err := a.st.Indexed()
	if err != nil {
		return nil, err
	}
	return v, v.FindForeign(a.holder.MayOwn(known), func() (map[nat.EgressKey]netip.Addr, error) {
		if a.opts.NAT == nil {
			return nil, nil
		}
		st, err := a.opts.NAT.Read()
		if err != nil {
			return nil, err
		}
		return st.Egress, nil
	})
}

// compareRouting is what the records need of the routing and what the
// kernel has, for repair and for status alike.
func (a *Assigner) compareRouting(recs map[string]*record) ([]uplinkroute.Need, *uplinkroute.View, error) {
	want, err := a.wantRouting(recs)
	if err != nil {
		return nil, nil, err
	}
	v, err := a.readRouting()
	return want, v, err
}

// routing makes the kernel's routing of ours match the records both
// ways: what they need is made, what they do not is taken away.
func (r *reconciling) routing() error {
	if r.router == nil {
		return nil
	}
	want, v, err := r.compareRouting(r.recs)
	if err != nil || r.router.Agrees(want, v) {
		return err
	}
	// Mended under the node lock, from what is read again under it.
	if err := r.router.Lock(); err != nil {
		return err
	}
	defer r.router.Release()
	if want, v, err = r.compareRouting(r.recs); err != nil {
		return err
	}
	return r.router.Reconcile(want, v)
}

// routing fails CHECK when the record's flows would not leave by their
// uplink as its routing needs.
func (c *checking) routing() error {
	if c.router == nil || c.rec.Steering == nil {
		return nil
	}
	ns, err := c.recordNeeds(c.rec)
	if err != nil || len(ns) == 0 {
		return err
	}
	v, err := c.readRouting()
	if err != nil {
		return err
	}
	return c.router.Check(ns, v)
}

// routing names, for status, every way the routing of ours and the
// records disagree, and lists the routed uplinks.
func (r *reporting) routing(recs map[string]*record) error {
	if r.router == nil {
		return nil
	}
	want, v, err := r.compareRouting(recs)
	if err != nil {
		return err
	}
	drift, uplinks := r.router.Report(want, v)
	r.rep.Drift = append(r.rep.Drift, drift...)
	r.rep.Uplinks = append(r.rep.Uplinks, uplinks...)
	return nil
}
