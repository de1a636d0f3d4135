package host

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/external-ip/external-ip/pkg/store"
)

// Screen refuses, before anything changes, every IP this holder cannot
// carry: one already on another interface (a node address), the network
// or broadcast address of its uplink subnet, one with no uplink, one the
// LAN could not reach held the way how says. It returns each IP's route,
// looked up before the IP is assigned, because afterwards the kernel
// answers "local".
//
// It runs before the dataDir's lock, and an ADD of another dataDir (its
// own holder device and lock) may put an IP on its holder between this
// look and Hold: held as a route, the kernel's EEXIST and a lookup catch
// it (addRoute); held as an address, the kernel takes the same address on
// a second device without a word, and both ADDs succeed. Closing that
// would take a second lookup of each new IP under a lock every dataDir
// shares (the node lock), from that look to the address being put: a
// netlink round trip and a lock on every ADD of a new IP, for two
// networks on one node handing out one IP, which their configs should
// never do (docs/reliability.md, "What is not held").
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
	if how.Route() && !routeWins(ip, r) {
		return r, h.refuseRoute(ip, r)
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

// routeWins says whether a host route of ours to ip would be the one the
// kernel uses, beside r, the route it uses now: always but where r is
// another host route to ip, in a table looked up before ours or of a
// metric no higher than ours (where the kernel refuses ours as existing).
// That route is another program's (a static route, one a routing daemon
// learned): a route of ours through the holder is found ours first.
func routeWins(ip netip.Addr, r Route) bool {
	if r.Prefix.Bits() != ip.BitLen() || r.Local != 0 || r.Special {
		return true
	}
	return r.Table == mainTable && r.Metric > ourMetric(ip)
}

// refuseRoute names the host route of another program that would keep
// external-ip from holding ip as a route: holding would put nothing in
// place, and taking the route over would change another program's.
func (h *Holder) refuseRoute(ip netip.Addr, r Route) error {
	return errorf(ErrRefused, "%s: is routed by another program's host route (%s), which the kernel would use instead of external-ip's; remove that route, or choose another IP", ip, h.describe(r))
}

// describe is r as ip route prints it, its table if not the main one.
func (h *Holder) describe(r Route) string {
	s := r.Prefix.String()
	if r.Gateway.IsValid() {
		s += " via " + r.Gateway.String()
	}
	s += fmt.Sprintf(" dev %s proto %d metric %d", h.k.LinkName(r.Dev), r.Proto, r.Metric)
	if r.Table != mainTable {
		s += fmt.Sprintf(" table %d", r.Table)
	}
	return s
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

// MayOwn tells, of each IP a rule of the shared table has, whether the
// rule may be this state's, known being the IPs its index lists: the IP
// is on our holder; or it is on no interface at all (another holder that
// is down has lost its IPs' local routes) and either known, or no other
// holder device exists whose state it could be. So one state directory
// never takes another's rules for strays, and one that lost its index
// still cleans up its own where it is the node's only one. Other holders
// are looked for once, and only for an IP that is neither.
func (h *Holder) MayOwn(known []netip.Addr) func(netip.Addr) bool {
	ours := make(map[netip.Addr]bool, len(known))
	for _, ip := range known {
		ours[ip] = true
	}
	var others *bool
	return func(ip netip.Addr) bool {
		r, err := h.k.Lookup(ip)
		if err != nil {
			return false
		}
		dev, _ := h.Find()
		if on := r.On(ip); on != 0 || ours[ip] {
			return on == dev || on == 0
		}
		if others == nil {
			o, err := h.k.OtherHolders(dev)
			o = o || err != nil // unknown: another's, left alone
			others = &o
		}
		return !*others
	}
}

// ScreenContainer refuses, before anything changes, a container whose
// address (from prevResult) the node itself holds: an address of the
// node's (a gateway's, the node's own, an external IP held as an
// address), or an external IP held as a route through a holder device,
// ours or another dataDir's. The steering would DNAT the external IP to
// the node, or to that other external IP, and SNAT the node's own flows
// from it.
func (h *Holder) ScreenContainer(addrs []netip.Prefix) error {
	for _, p := range addrs {
		c := p.Addr()
		r, err := h.k.Lookup(c)
		if err != nil {
			return err
		}
		if r.Local != 0 {
			return errorf(ErrRefused, "traffic: prevResult gives the container %s, an address of the node's own %s", c, h.k.LinkName(r.Local))
		}
		if on := r.On(c); on != 0 {
			if name, ok := h.holderAt(on); ok {
				return errorf(ErrRefused, "traffic: prevResult gives the container %s, an external IP held as a route on holder device %s", c, name)
			}
		}
	}
	return nil
}

// holderAt names the device of index dev when it is a holder of external
// IPs: ours, or one marked by another dataDir. A container's own host
// route (a veth of the ptp plugin) costs two lookups of its device.
func (h *Holder) holderAt(dev int) (string, bool) {
	if ours, err := h.Find(); err == nil && ours == dev {
		return h.Name, true
	}
	name := h.k.LinkName(dev)
	l, err := h.k.LookupHolder(name)
	return name, err == nil && l.Index == dev && strings.HasPrefix(l.Alias, HolderMark)
}
