package assigner

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/host"
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
	if err := a.queue.Check(rec.IPs); err != nil {
		return rec.IPs, err
	}
	return rec.IPs, a.checkRouting(rec)
}

func (a *Assigner) checkHolder() (int, error) {
	l, err := a.holder.Look()
	if err != nil {
		return 0, err
	}
	dev, err := a.holder.Judge(l)
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
	if err := a.holder.CheckOn(dev, ip, e.Route); err != nil {
		return err
	}
	if !host.NeedsProxy(ip, e.Route) {
		return nil
	}
	ok, err := a.k.HasProxy(e.Uplink, ip)
	if err != nil {
		return err
	}
	if !ok {
		return Errorf(ErrDrift, "%s: has no proxy neighbour entry on uplink %s", ip, e.Uplink)
	}
	return nil
}
