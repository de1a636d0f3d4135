package assigner

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/steer"
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
	c := &checking{Assigner: a, key: key, rec: rec}
	dev, err := c.holderDev()
	if err != nil {
		return nil, err
	}
	for _, ip := range rec.IPs {
		if err := c.ip(dev, ip); err != nil {
			return nil, err
		}
	}
	// A standby IP being off the holder is what standby means.
	if ip, err := store.QuestionsOf(a.st).NotStandingBy(key, rec.StandbyIPs); err != nil || ip.IsValid() {
		return nil, cmp.Or(err, Errorf(ErrDrift, "%s: its index %s does not list this attachment in standby", ip, a.st.IPPath(ip)))
	}
	if err := c.nat(); err != nil {
		return nil, err
	}
	if err := a.queue.Check(rec.IPs); err != nil {
		return rec.Held(), err
	}
	return rec.Held(), c.routing()
}

// checking is one CHECK of an attachment's record: each of its IPs on
// the holder, its rules in the table, its clean-ups and its routing.
type checking struct {
	*Assigner
	key string
	rec *record
}

// holderDev is the holder, ours and up.
func (c *checking) holderDev() (int, error) {
	l, err := c.holder.Look()
	if err != nil {
		return 0, err
	}
	dev, err := c.holder.Judge(l)
	if err != nil {
		return 0, err
	}
	if dev == 0 {
		return 0, Errorf(ErrDrift, "holder device %s: is missing", c.opts.Device)
	}
	if !l.Up {
		return 0, Errorf(ErrDrift, "holder device %s: is down", c.opts.Device)
	}
	return dev, nil
}

// ip fails when the index does not list the attachment as a holder of
// ip, or ip is not on the holder as it is held, or has no proxy entry
// where the LAN needs one.
func (c *checking) ip(dev int, ip netip.Addr) error {
	e, err := c.st.ReadIP(ip)
	if err != nil {
		return err
	}
	if !slices.Contains(e.Holders, c.key) {
		return Errorf(ErrDrift, "%s: its index %s does not list this attachment", ip, c.st.IPPath(ip))
	}
	if err := c.holder.CheckOn(dev, ip, e.Route); err != nil {
		return err
	}
	if !host.NeedsProxy(ip, e.Route) {
		return nil
	}
	ok, err := c.k.HasProxy(e.Uplink, ip)
	if err != nil {
		return err
	}
	if !ok {
		return Errorf(ErrDrift, "%s: has no proxy neighbour entry on uplink %s", ip, e.Uplink)
	}
	return nil
}

// nat fails CHECK when a rule of the record is missing, points elsewhere
// or uses a container address that CHECK's prevResult (opts.Container)
// does not give: steer.Compare of the part of the table its rules make,
// its steered IPs' ingress to the targets of all their holders.
func (c *checking) nat() error {
	rec := c.rec
	if rec.Steering == nil || c.opts.NAT == nil {
		return nil
	}
	st, err := c.opts.NAT.Read()
	if err != nil {
		return err
	}
	holders, err := onDisk(c.st).holdings(steer.Steered(rec))
	if err != nil {
		return err
	}
	// What is stray is no one attachment's drift: status and GC see it.
	d := steer.Compare(steer.WantOfRecord(rec, holders), st, func(netip.Addr) bool { return false })
	return steer.Check(rec, c.opts.Container, d, func(ip netip.Addr) (string, error) {
		e, err := c.st.ReadIP(ip)
		return e.Uplink, err
	})
}
