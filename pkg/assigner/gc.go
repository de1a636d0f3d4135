package assigner

import (
	"errors"
	"net/netip"
	"slices"
)

// GC drops the records of network whose attachments are not in keep, then
// reconciles the holder with the records of every network: held IPs that
// went missing come back, addresses nobody holds go.
func (a *Assigner) GC(network string, keep []Attachment) error {
	return a.withState(func() error { return a.collect(network, keep) })
}

func (a *Assigner) collect(network string, keep []Attachment) error {
	recs, err := a.st.records()
	if err != nil {
		return err
	}
	kept := map[string]bool{}
	for _, att := range keep {
		kept[att.key()] = true
	}
	for key, r := range recs {
		if r.Network != network || kept[key] {
			continue
		}
		if err := a.commit(&journal{Key: key, Touch: r.IPs}); err != nil {
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
	indexed, err := a.st.indexed()
	if err != nil {
		return err
	}
	var errs []error
	for _, ip := range union(indexed, keys(want)) {
		errs = append(errs, a.reconcileIP(dev, ip, want[ip]))
	}
	errs = append(errs, a.dropStray(dev, want), a.st.sweepTmp())
	return errors.Join(errs...)
}

func (a *Assigner) reconcileHolder(needed bool) (int, error) {
	if needed {
		return a.ensureHolder()
	}
	return a.k.holder(a.opts.Device, false, false)
}

func (a *Assigner) reconcileIP(dev int, ip netip.Addr, holders []string) error {
	e, err := a.st.readIP(ip)
	if err != nil {
		return err
	}
	slices.Sort(holders)
	if len(holders) == 0 {
		return a.release(dev, ip, e)
	}
	if !slices.Equal(e.Holders, holders) || e.Uplink == "" {
		e.Holders = holders
		if e.Uplink == "" {
			e.Uplink = a.recoverUplink(ip)
		}
		if err := a.st.writeIP(ip, e); err != nil {
			return err
		}
	}
	return a.hold(dev, ip, e.Uplink)
}

// recoverUplink finds an uplink for an IP whose index entry was lost; an
// empty answer only costs the IPv6 proxy entry until the next ADD.
func (a *Assigner) recoverUplink(ip netip.Addr) string {
	r, err := a.k.lookup(ip)
	if err != nil {
		return ""
	}
	up, err := a.uplinkFor(ip, r)
	if err != nil {
		return ""
	}
	return up.Name
}

// dropStray removes addresses on the holder that no record holds. Only GC
// lists the holder's addresses: it is ours alone, so whatever is on it and
// unheld is a leak.
func (a *Assigner) dropStray(dev int, want map[netip.Addr][]string) error {
	if dev == 0 {
		return nil
	}
	addrs, err := a.k.holderAddrs(dev)
	if err != nil {
		return err
	}
	var errs []error
	for _, ip := range addrs {
		if _, held := want[ip]; held {
			continue
		}
		removed, err := a.k.delAddr(dev, ip)
		if removed {
			a.log.Info("stray address removed", "ip", ip)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
	return a.withState(func() error {
		recs, err := a.st.records()
		if err != nil {
			return err
		}
		a.log.Info("repairing", "records", len(recs))
		return a.reconcile(recs)
	})
}
