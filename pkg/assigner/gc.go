package assigner

import (
	"errors"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/errkind"
)

// GC drops the records of network whose attachments are not in keep, then
// reconciles the holder with the records of every network: held IPs that
// went missing come back, addresses nobody holds go.
func (a *Assigner) GC(network string, keep []Attachment) error {
	a.startCall()
	lost, err := a.lostState()
	if err != nil {
		return err
	}
	if err := a.underLock(lost, func() error { return a.collect(network, keep) }); err != nil {
		return err
	}
	// Best effort: a failure stays queued, for status and the next GC.
	if err := a.ForgetPending(); err != nil {
		a.log.Warn("conntrack clean-up failed; the next GC or repair retries it", "error", errkind.OneLine(err))
	}
	return nil
}

// lostState says whether the state directory is gone while the holder of
// this dataDir still carries addresses: then GC and repair make it again
// and, finding no record at all, remove every address and its proxy
// entries, none of them being held. Only a holder marked for this very
// dataDir counts: one marked the old way may carry another dataDir's.
func (a *Assigner) lostState() (bool, error) {
	if a.st.Exists() {
		return false, nil
	}
	l, err := a.holder.Look()
	if err != nil || l.Index == 0 || !a.holder.OwnedBy(l.Alias) {
		return false, err
	}
	if _, err := a.holder.Judge(l); err != nil {
		return false, nil // not ours after all (a bridge with ports): nothing to do
	}
	addrs, err := a.k.HolderAddrs(l.Index)
	if err != nil {
		return false, err
	}
	routes, err := a.k.HolderRoutes(l.Index)
	if err != nil || len(addrs)+len(routes) == 0 {
		return false, err
	}
	a.log.Warn("state directory lost while the holder carries addresses or routes; releasing them", "dir", a.st.Dir(), "addresses", len(addrs), "routes", len(routes))
	return true, nil
}

func (a *Assigner) collect(network string, keep []Attachment) error {
	recs, err := a.st.Records()
	if err != nil {
		return err
	}
	kept := map[string]bool{}
	for _, att := range keep {
		kept[att.Key()] = true
	}
	for key, r := range recs {
		if r.Network != network || kept[key] {
			continue
		}
		if err := a.commit(releasing(key, r)); err != nil {
			return err
		}
		a.log.Info("collected", "attachment", r.Attachment.String(), "ips", r.IPs)
		delete(recs, key)
	}
	return a.reconcile(recs)
}

// reconcile rebuilds the index from the records, which are the truth, and
// makes the holder carry exactly the held IPs.
func (a *Assigner) reconcile(recs map[string]*record) error {
	want := map[netip.Addr][]string{}
	for key, r := range recs {
		for _, ip := range r.IPs {
			want[ip] = append(want[ip], key)
		}
	}
	dev, err := a.reconcileHolder(len(want) > 0)
	if err != nil {
		return err
	}
	indexed, err := a.st.Indexed()
	if err != nil {
		return err
	}
	var errs []error
	for _, ip := range union(indexed, keys(want)) {
		errs = append(errs, a.reconcileIP(dev, ip, want[ip], recs))
	}
	errs = append(errs, a.dropStray(dev, want), a.st.SweepTmp(), a.followUplinks(recs), a.reconcileNAT(recs), a.reconcileRouting(recs))
	return errors.Join(errs...)
}

// reconcileHolder is the holder GC works on: made if any IP is held, else
// the one there is, if ours (re-marked for this dataDir if need be).
func (a *Assigner) reconcileHolder(needed bool) (int, error) {
	if needed {
		return a.holder.Ensure()
	}
	l, err := a.holder.Look()
	if err != nil || l.Index == 0 {
		return 0, err
	}
	return a.holder.Claim(l)
}

func (a *Assigner) reconcileIP(dev int, ip netip.Addr, holders []string, recs map[string]*record) error {
	e, err := a.st.ReadIP(ip)
	if err != nil {
		return err
	}
	slices.Sort(holders)
	if len(holders) == 0 {
		return a.release(dev, ip, e)
	}
	rehome := e.Uplink == "" || a.ups.Gone(e.Uplink)
	h := agreedHold(e, holders, recs)
	if h != e.Route {
		if err := a.unhold(dev, ip, e); err != nil {
			return err
		}
		a.log.Info("hold switched", "ip", ip, "from", e.Route.String(), "to", h.String())
	}
	if !slices.Equal(e.Holders, holders) || rehome || h != e.Route {
		e.Holders, e.Route = holders, h
		if rehome {
			was := e.Uplink
			e.Uplink = a.ups.Recover(ip)
			if was != "" {
				a.log.Warn("uplink of a held IP is gone; re-homed", "ip", ip, "uplink", was, "now", e.Uplink)
			}
		}
		if err := a.st.WriteIP(ip, e); err != nil {
			return err
		}
	}
	return a.hold(dev, ip, e)
}

// agreedHold is how ip is to be held: as its holders' records all ask, or
// as it is held now while they disagree. An IP that lost its index entry
// is held as its first holder's record (by key) asks.
func agreedHold(e ipEntry, holders []string, recs map[string]*record) heldAs {
	first := recs[holders[0]].Route
	for _, k := range holders[1:] {
		if recs[k].Route != first {
			if len(e.Holders) == 0 {
				return first
			}
			return e.Route
		}
	}
	return first
}

// dropStray removes from the holder what no record holds, or what is
// held the other way (what a switch of hold interrupted by a crash
// leaves), with the proxy entries of the IPs nobody holds.
func (a *Assigner) dropStray(dev int, want map[netip.Addr][]string) error {
	held := func(ip netip.Addr) bool { _, ok := want[ip]; return ok }
	return a.holder.Sweep(dev, held, func(ip netip.Addr, route bool) bool {
		if !held(ip) {
			return true
		}
		e, err := a.st.ReadIP(ip)
		return err == nil && e.Route.Route() != route
	})
}

func keys[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Repair is GC that drops no record: it finishes an interrupted change,
// rebuilds the index from the records and makes the holder carry exactly
// the held IPs. The operator runs it after moving a corrupt file aside.
func (a *Assigner) Repair() error {
	a.startCall()
	lost, err := a.lostState()
	if err != nil {
		return err
	}
	err = a.underLock(lost, func() error {
		recs, err := a.st.Records()
		if err != nil {
			return err
		}
		a.log.Info("repairing", "records", len(recs))
		return a.reconcile(recs)
	})
	if err != nil {
		return err
	}
	// Off the lock; the operator sees a failure, which stays queued.
	return errkind.OneLine(a.ForgetPending())
}
