package assigner

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/store"
)

// Check changes nothing. It fails when att has no record, when the holder
// is missing or down, or when one of att's IPs is not on the holder or, for
// IPv6, has no proxy entry on its uplink. It returns the IPs att holds.
func (a *Assigner) Check(att Attachment) ([]netip.Addr, error) {
	a.startCall()
	l, err := a.lockToRead()
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, Errorf(ErrDrift, "attachment %s: no record (state directory %s does not exist or is incomplete)", att, a.st.Dir())
	}
	defer l.Unlock()
	pending, err := a.st.Has(store.JournalFile)
	if err != nil {
		return nil, err
	}
	if pending {
		return nil, Errorf(ErrDrift, "an interrupted change is pending in %s; the next ADD, DEL or GC finishes it", a.st.Path(store.JournalFile))
	}
	key := att.Key()
	rec, err := a.st.ReadRecord(key)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, Errorf(ErrDrift, "attachment %s: no record in %s", att, a.st.Dir())
	}
	dev, err := a.checkHolder()
	if err != nil {
		return nil, err
	}
	for _, ip := range rec.IPs {
		if err := a.checkIP(dev, key, ip); err != nil {
			return nil, err
		}
	}
	if err := a.checkNAT(rec); err != nil {
		return nil, err
	}
	if err := a.checkForgets(rec.IPs); err != nil {
		return rec.IPs, err
	}
	return rec.IPs, a.checkRouting(rec)
}

func (a *Assigner) checkHolder() (int, error) {
	l, err := a.lookHolder()
	if err != nil {
		return 0, err
	}
	dev, err := a.judge(l)
	if err != nil {
		return 0, err
	}
	if dev == 0 {
		return 0, Errorf(ErrDrift, "holder device %s: is missing", a.opts.Device)
	}
	if !l.Up {
		return 0, Errorf(ErrDrift, "holder device %s: is down", a.opts.Device)
	}
	return dev, nil
}

func (a *Assigner) checkIP(dev int, key string, ip netip.Addr) error {
	e, err := a.st.ReadIP(ip)
	if err != nil {
		return err
	}
	if !slices.Contains(e.Holders, key) {
		return Errorf(ErrDrift, "%s: its index %s does not list this attachment", ip, a.st.IPPath(ip))
	}
	if err := a.checkOnHolder(dev, ip, e); err != nil {
		return err
	}
	if !needsProxy(ip, e.Route) {
		return nil
	}
	ok, err := a.k.hasProxy(e.Uplink, ip)
	if err != nil {
		return err
	}
	if !ok {
		return Errorf(ErrDrift, "%s: has no proxy neighbour entry on uplink %s", ip, e.Uplink)
	}
	return nil
}

// checkOnHolder fails when ip is not on the holder the way e says: its
// address, or its host route of e's protocol number.
func (a *Assigner) checkOnHolder(dev int, ip netip.Addr, e ipEntry) error {
	r, err := a.k.lookup(ip)
	if err != nil {
		return err
	}
	if e.Route.Route() {
		if r.local != 0 || r.on(ip) != dev || r.proto != int(e.Route) {
			return Errorf(ErrDrift, "%s: has no route through holder device %s with protocol %d", ip, a.opts.Device, e.Route)
		}
		return nil
	}
	if r.local != dev {
		if on, err := a.onHolder(dev, ip); err != nil || !on {
			return cmp.Or(err, Errorf(ErrDrift, "%s: is not on holder device %s", ip, a.opts.Device))
		}
	}
	return nil
}

// onHolder asks the holder's address list, only when the FIB said no: the
// kernel puts an IPv6 address's local route in place from a work queue,
// a moment after the address, so a CHECK right after ADD can ask too soon.
func (a *Assigner) onHolder(dev int, ip netip.Addr) (bool, error) {
	addrs, err := a.k.holderAddrs(dev)
	return slices.Contains(addrs, ip), err
}
