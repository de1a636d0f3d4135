package assigner

import (
	"net/netip"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// HostRouting is the Routing of the host: the marks in table inet
// external-ip (over the NAT's netlink connection) and the rules and
// tables of package uplinkroute.
type HostRouting struct {
	nat      *HostTable
	r        *uplinkroute.Routes
	c        uplinkroute.Config
	gateways map[string][]netip.Addr
	off      bool
}

var _ Routing = (*HostRouting)(nil)

// NewHostRouting routes with c, taking an uplink's gateway from gateways
// (uplink name -> at most one per family) before the main table. Off
// routes nothing new, but still takes away what was routed.
func NewHostRouting(nat *HostTable, c uplinkroute.Config, gateways map[string][]netip.Addr, off bool) *HostRouting {
	return &HostRouting{nat: nat, r: uplinkroute.Open(c), c: c, gateways: gateways, off: off}
}

func (h *HostRouting) Off() bool { return h.off }

// Close releases the routing socket (the NAT's is its owner's).
func (h *HostRouting) Close() { h.r.Close() }

func (h *HostRouting) Config() uplinkroute.Config { return h.c }

func (h *HostRouting) DefaultUplink(v6 bool) (int, error) { return h.r.DefaultUplink(v6) }

func (h *HostRouting) Gateway(uplink string, index int, ip netip.Addr) (netip.Addr, error) {
	for _, g := range h.gateways[uplink] {
		if g.Is4() == ip.Is4() {
			return g, nil
		}
	}
	return h.r.Gateway(index, ip)
}

func (h *HostRouting) ReadRoutes() (*uplinkroute.State, error) { return h.r.Read() }

func (h *HostRouting) Collides(s int) (string, error) { return h.r.Collides(s) }

func (h *HostRouting) EnsureRoutes(s int, uplink string, gw [2]netip.Addr, replace bool) error {
	return h.r.Ensure(s, uplink, gw, replace)
}

func (h *HostRouting) RemoveRoutes(s int, others []int) error { return h.r.Remove(s, others) }

func (h *HostRouting) Marked() (map[string]nat.UplinkSlot, error) {
	var out map[string]nat.UplinkSlot
	err := h.nat.do(func(t *nat.Table) (err error) {
		out, err = t.Uplinks()
		for name, u := range out {
			u.Slot = h.c.SlotOf(u.Mark)
			out[name] = u
		}
		return err
	})
	return out, err
}

func (h *HostRouting) SetMarked(all, gone map[string]nat.UplinkSlot) error {
	return h.nat.do(func(t *nat.Table) error { return t.SetUplinks(all, gone, h.c.Mask) })
}

func (h *HostRouting) SetMembers(add, del []nat.UplinkMember) error {
	return h.nat.do(func(t *nat.Table) error { return t.SetUplinkMembers(add, del) })
}

func (h *HostRouting) ReadMarked() (*nat.UplinkState, error) {
	var st *nat.UplinkState
	err := h.nat.do(func(t *nat.Table) (err error) {
		st, err = t.ReadUplinks(h.c.Mask)
		return err
	})
	return st, err
}
