package assigner

// GC's and repair's reconciling of the host with the records: the index,
// the holder, the table and the uplink routing (routing.go), each made to
// say what the records say.

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
)

// reconciling is one GC or repair making the host match recs: the records
// that stay, which are the truth the index is rebuilt from.
type reconciling struct {
	*Assigner
	recs map[string]*record
	// owns says which of the table's rules may be this state's, from the
	// index as the reconcile found it (host.Holder.MayOwn).
	owns func(netip.Addr) bool
}

// reconcile rebuilds the index from the records and makes the holder
// carry exactly the held IPs, the table steer them and the uplinks route
// them as the records say.
func (a *Assigner) reconcile(recs map[string]*record) error {
	r := &reconciling{Assigner: a, recs: recs}
	want := map[netip.Addr][]string{}
	for key, rec := range recs {
		for _, ip := range rec.IPs {
			want[ip] = append(want[ip], key)
		}
	}
	dev, err := r.holderDev(len(want) > 0)
	if err != nil {
		return err
	}
	indexed, err := a.st.Indexed()
	if err != nil {
		return err
	}
	r.owns = a.holder.MayOwn(indexed)
	var errs []error
	waiting := store.StandbyOf(recs)
	for _, ip := range union(union(indexed, keys(want)), keys(waiting)) {
		errs = append(errs, r.ip(dev, ip, want[ip], waiting[ip]))
	}
	errs = append(errs, r.dropStray(dev, want), a.st.SweepTmp(), a.followUplinks(recs), r.nat(), r.routing())
	return errors.Join(errs...)
}

// holderDev is the holder GC works on: made if any IP is held, else the
// one there is, if ours (re-marked for this dataDir if need be).
func (r *reconciling) holderDev(needed bool) (int, error) {
	if needed {
		return r.holder.Ensure()
	}
	l, err := r.holder.Look()
	if err != nil || l.Index == 0 {
		return 0, err
	}
	return r.holder.Claim(l)
}

// ip makes ip's index entry list holders (and its uplink one that still
// exists), and the holder carry it as they ask, or not at all.
func (r *reconciling) ip(dev int, ip netip.Addr, holders, waiting []string) error {
	e, err := r.st.ReadIP(ip)
	if err != nil {
		return err
	}
	slices.Sort(holders)
	slices.Sort(waiting)
	if len(holders) == 0 && len(waiting) > 0 {
		return r.standingBy(ip, e, waiting) // dropStray takes it off the holder
	}
	if len(holders) == 0 {
		return r.release(dev, ip, e)
	}
	if !slices.Equal(e.Standby, waiting) {
		e.Standby = waiting
		if err := r.st.WriteIP(ip, e); err != nil {
			return err
		}
	}
	rehome := e.Uplink == "" || r.ups.Gone(e.Uplink)
	h := agreedHold(e, holders, r.recs)
	if h != e.Route {
		if err := r.holder.Unhold(dev, ip, e); err != nil {
			return err
		}
		r.log.Info("hold switched", "ip", ip, "from", e.Route.String(), "to", h.String())
	}
	changed := !slices.Equal(e.Holders, holders) || rehome || h != e.Route
	hadNone := !host.NeedsProxy(ip, e.Route) // a switch may bring the proxy entry
	e.Holders, e.Route = holders, h
	if rehome {
		was := e.Uplink
		e.Uplink = r.ups.Recover(ip)
		if was != "" {
			r.log.Warn("uplink of a held IP is gone; re-homed", "ip", ip, "uplink", was, "now", e.Uplink)
		}
	}
	keep, err := r.keepProxy(ip, e, rehome || hadNone)
	if err != nil {
		return err
	}
	changed, e.KeepProxy = changed || keep != e.KeepProxy, keep
	if changed {
		if err := r.st.WriteIP(ip, e); err != nil {
			return err
		}
	}
	_, err = r.holder.Hold(dev, ip, e)
	return err
}

// keepProxy says whether the proxy entry ip needs on its uplink is
// another program's, asked only where that may have changed: when the
// entry is to be made anew (anew: re-homed, or the IP switched to a hold
// that needs one), or when it was another program's, which may have
// removed it since (the one repair then makes is ours).
func (r *reconciling) keepProxy(ip netip.Addr, e ipEntry, anew bool) (bool, error) {
	if !host.NeedsProxy(ip, e.Route) || e.Uplink == "" || !anew && !e.KeepProxy {
		return e.KeepProxy, nil
	}
	return r.holder.ProxyThere(e.Uplink, ip)
}

// dropStray removes from the holder what no record holds, or what is
// held the other way (what a switch of hold interrupted by a crash
// leaves), with the proxy entries of the IPs nobody holds.
func (r *reconciling) dropStray(dev int, want map[netip.Addr][]string) error {
	held := func(ip netip.Addr) bool { _, ok := want[ip]; return ok }
	return r.holder.Sweep(dev, held, func(ip netip.Addr, route bool) bool {
		if !held(ip) {
			return true
		}
		e, err := r.st.ReadIP(ip)
		return err == nil && e.Route.Route() != route
	})
}

// nat makes the table match the records both ways (steer.Mend): missing
// rules come back, rules of gone attachments go. A rule for an IP that
// another holder device's state may have is left alone.
func (r *reconciling) nat() error {
	if r.opts.NAT == nil {
		return nil
	}
	w := steer.WantOf(r.recs)
	st, err := r.opts.NAT.Read()
	if err != nil || (!st.Present && w.Empty()) {
		return err
	}
	return steer.Mend(r.opts.NAT, steer.Compare(w, st, r.owns), w, r.log, r.queue.Add)
}

// restoreTable steers again every attachment of this state directory
// after a change made the table anew (the host firewall's `nft flush
// ruleset` deleted it): the change's own rules came back with it, the
// others' come back here, as GC makes them. Another state directory's
// wait for its GC, repair or the upkeep (docs/steering-faults.md). A
// failure is left to those too: the change itself is made.
func (c *change) restoreTable() {
	recs, err := c.st.Records()
	known, err2 := c.st.Indexed()
	if err = errors.Join(err, err2); err == nil {
		r := &reconciling{Assigner: c.Assigner, recs: recs, owns: c.holder.MayOwn(known)}
		err = errors.Join(r.nat(), r.routing())
	}
	if err != nil {
		c.log.Warn("table inet external-ip made anew; the other attachments' rules are left to GC, repair and the upkeep", "error", errkind.OneLine(err))
	} else {
		c.log.Info("table inet external-ip made anew; every attachment's rules restored", "records", len(recs))
	}
}
