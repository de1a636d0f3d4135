package uplinkroute

import (
	"net/netip"
	"time"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// HostRouting is the Routing of the host: the marks in table inet
// external-ip (over the NAT's netlink connection) and the rules and
// tables of this package.
type HostRouting struct {
	nat      *steer.HostTable
	r        *Routes
	c        slots.Config
	gateways map[string][]netip.Addr
	off      bool
	now      *State // our tables as first read, for routedBy
	// LockDir is where the node lock is: store.NodeLockDir, but in tests.
	LockDir string
}

var _ Routing = (*HostRouting)(nil)

// NewHostRouting routes with c, taking an uplink's gateway from gateways
// (uplink name -> at most one per family) before the main table. Off
// routes nothing new, but still takes away what was routed.
func NewHostRouting(nat *steer.HostTable, c slots.Config, gateways map[string][]netip.Addr, off bool) *HostRouting {
	nat.SetUplinkMask(c.Mask) // the table's base rules keep the same bits
	return &HostRouting{nat: nat, r: Open(c), c: c, gateways: gateways, off: off, LockDir: store.NodeLockDir}
}

func (h *HostRouting) LockNode(wait time.Duration) (func(), error) {
	l, err := store.LockNode(h.LockDir, wait)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (h *HostRouting) Off() bool { return h.off }

// Close releases the routing socket (the NAT's is its owner's).
func (h *HostRouting) Close() { h.r.Close() }

func (h *HostRouting) Config() slots.Config { return h.c }

func (h *HostRouting) DefaultUplink(v6 bool) (int, error) { return h.r.DefaultUplink(v6) }

func (h *HostRouting) Gateway(uplink string, index int, ip netip.Addr) (netip.Addr, error) {
	for _, g := range h.gateways[uplink] {
		if g.Is4() == ip.Is4() {
			return g, nil
		}
	}
	gw, err := h.r.Gateway(index, ip)
	if err != nil || gw.IsValid() {
		return gw, err
	}
	return h.routedBy(uplink, ip.Is6())
}

// routedBy is the gateway our table routes uplink by now: a gateway that
// a network's key named is kept by those who do not have its config
// (external-ip status and repair) and by a network that does not name it.
func (h *HostRouting) routedBy(uplink string, v6 bool) (netip.Addr, error) {
	if h.now == nil {
		st, err := h.r.Read()
		if err != nil {
			return netip.Addr{}, err
		}
		h.now = st
	}
	for _, sl := range h.now.Slots {
		if sl.Uplink == uplink {
			return sl.Gateway[fam(v6)], nil
		}
	}
	return netip.Addr{}, nil
}

func (h *HostRouting) ReadRoutes() (*State, error) { return h.r.Read() }

func (h *HostRouting) Collides(s int) (string, error) { return h.r.Collides(s) }

func (h *HostRouting) EnsureRoutes(s int, uplink string, index int, gw [2]netip.Addr, replace bool) error {
	return h.r.Ensure(s, uplink, index, gw, replace)
}

func (h *HostRouting) RemoveRoutes(s int, fams, last [2]bool) error {
	return h.r.Remove(s, fams, last)
}

func (h *HostRouting) Marked() (map[string]nat.UplinkSlot, error) {
	var out map[string]nat.UplinkSlot
	err := h.nat.With(func(t *nat.Table) (err error) { out, err = t.Uplinks(); return err })
	return out, err
}

func (h *HostRouting) Mark(chains []nat.UplinkChain) error {
	if err := h.sameConfig(); err != nil {
		return err
	}
	return h.nat.With(func(t *nat.Table) error { return t.MarkUplinks(chains) })
}

func (h *HostRouting) Unmark(chains []nat.UplinkChain) error {
	return h.nat.With(func(t *nat.Table) error { return t.UnmarkUplinks(chains) })
}

func (h *HostRouting) SetMembers(add, del []nat.UplinkMember) error {
	return h.nat.With(func(t *nat.Table) error { return t.SetUplinkMembers(add, del) })
}

func (h *HostRouting) ReadMarked() (*nat.UplinkState, error) {
	var st *nat.UplinkState
	err := h.nat.With(func(t *nat.Table) (err error) {
		st, err = t.ReadUplinks(h.c.Mask)
		return err
	})
	return st, err
}
