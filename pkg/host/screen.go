package host

import (
	"net/netip"

	"github.com/external-ip/external-ip/pkg/store"
)

// Screen refuses, before anything changes, every IP this holder cannot
// carry: one already on another interface (a node address), the network
// or broadcast address of its uplink subnet, one with no uplink, one the
// LAN could not reach held the way how says. It returns each IP's route,
// looked up before the IP is assigned, because afterwards the kernel
// answers "local".
func (h *Holder) Screen(ups *Uplinks, how store.HeldAs, ips []netip.Addr) (map[netip.Addr]Route, error) {
	dev, err := h.Find()
	if err != nil {
		return nil, err
	}
	if ups.configured != "" {
		if _, err := ups.ByName(ups.configured); err != nil {
			return nil, err
		}
	}
	routes := make(map[netip.Addr]Route, len(ips))
	for _, ip := range ips {
		r, err := h.screenIP(ups, how, dev, ip)
		if err != nil {
			return nil, err
		}
		routes[ip] = r
	}
	return routes, nil
}

func (h *Holder) screenIP(ups *Uplinks, how store.HeldAs, dev int, ip netip.Addr) (Route, error) {
	r, err := h.k.Lookup(ip)
	if err != nil {
		return r, err
	}
	if on := r.On(ip); on != 0 {
		if dev == 0 {
			// A concurrent ADD may have made the holder since Screen looked
			// and put ip on it: then ip is ours, not a node address.
			l, err := h.Fresh()
			if err != nil {
				return r, err
			}
			if dev, err = h.Judge(l); err != nil {
				return r, err
			}
		}
		if on == dev {
			return r, nil // ours already: its uplink is in the index
		}
		if r.Local == 0 {
			// A pod's or a peer's host route: holding ip would take its traffic.
			return r, errorf(ErrRefused, "%s: is routed to interface %s by a host route on this node", ip, h.k.LinkName(on))
		}
		return r, errorf(ErrRefused, "%s: is already an address of interface %s on this node", ip, h.k.LinkName(r.Local))
	}
	if r.Special {
		return r, h.refuseSpecial(ip, r)
	}
	if r.Connected {
		if edge := subnetEdge(ip, r.Prefix); edge != "" {
			return r, errorf(ErrRefused, "%s: is the %s address of uplink subnet %s", ip, edge, r.Prefix)
		}
	}
	up, err := ups.For(ip, r)
	if err != nil {
		return r, err
	}
	return r, AboutIP(ip, h.k.Reachable(up, ip.Is6(), how))
}

// refuseSpecial names the subnet whose broadcast or subnet-router anycast
// address ip is, from the main table's connected route.
func (h *Holder) refuseSpecial(ip netip.Addr, r Route) error {
	if m, err := h.k.MainRoute(ip, 0); err == nil && m.Connected {
		if edge := subnetEdge(ip, m.Prefix); edge != "" {
			return errorf(ErrRefused, "%s: is the %s address of uplink subnet %s", ip, edge, m.Prefix)
		}
	}
	return errorf(ErrRefused, "%s: is a broadcast or anycast address of interface %s on this node", ip, h.k.LinkName(r.Dev))
}

// subnetEdge names the subnet address ip is, if it is one no host may take.
func subnetEdge(ip netip.Addr, p netip.Prefix) string {
	if ip == p.Masked().Addr() && p.Bits() < ip.BitLen()-1 {
		return "network"
	}
	if ip.Is4() && p.Bits() < 31 && ip == broadcast(p) {
		return "broadcast"
	}
	return ""
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// MayOwn tells whether a rule for ip may be ours: ip is on our holder or
// on no interface at all, not on another holder device of another state.
func (h *Holder) MayOwn(ip netip.Addr) bool {
	r, err := h.k.Lookup(ip)
	if err != nil {
		return false
	}
	dev, _ := h.Find()
	on := r.On(ip)
	return on == 0 || on == dev
}
