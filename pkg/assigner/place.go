package assigner

import (
	"errors"
	"net/netip"
)

// screen refuses, before anything changes, every IP this host cannot take:
// one already on another interface (a node address), the network or
// broadcast address of its uplink subnet, one with no uplink, one the LAN
// could not reach. It returns each IP's route, looked up before the IP is
// assigned, because afterwards the kernel answers "local".
func (a *Assigner) screen(ips []netip.Addr) (map[netip.Addr]route, error) {
	dev, err := a.findHolder()
	if err != nil {
		return nil, err
	}
	if a.opts.Uplink != "" {
		if _, err := a.ups.byName(a.opts.Uplink); err != nil {
			return nil, err
		}
	}
	routes := make(map[netip.Addr]route, len(ips))
	for _, ip := range ips {
		r, err := a.screenIP(dev, ip)
		if err != nil {
			return nil, err
		}
		routes[ip] = r
	}
	return routes, nil
}

func (a *Assigner) screenIP(dev int, ip netip.Addr) (route, error) {
	r, err := a.k.lookup(ip)
	if err != nil {
		return r, err
	}
	if on := r.on(ip); on != 0 {
		if dev == 0 {
			// A concurrent ADD may have made the holder since screen looked
			// and put ip on it: then ip is ours, not a node address.
			l, err := a.freshHolder()
			if err != nil {
				return r, err
			}
			if dev, err = a.judge(l); err != nil {
				return r, err
			}
		}
		if on == dev {
			return r, nil // ours already: its uplink is in the index
		}
		if r.local == 0 {
			// A pod's or a peer's host route: heldAs ip would take its traffic.
			return r, Errorf(ErrRefused, "%s: is routed to interface %s by a host route on this node", ip, a.k.linkName(on))
		}
		return r, Errorf(ErrRefused, "%s: is already an address of interface %s on this node", ip, a.k.linkName(r.local))
	}
	if r.special {
		return r, a.refuseSpecial(ip, r)
	}
	if r.connected {
		if edge := subnetEdge(ip, r.prefix); edge != "" {
			return r, Errorf(ErrRefused, "%s: is the %s address of uplink subnet %s", ip, edge, r.prefix)
		}
	}
	up, err := a.uplinkFor(ip, r)
	if err != nil {
		return r, err
	}
	return r, aboutIP(ip, a.k.reachable(up, ip.Is6(), a.holding()))
}

// refuseSpecial names the subnet whose broadcast or subnet-router anycast
// address ip is, from the main table's connected route.
func (a *Assigner) refuseSpecial(ip netip.Addr, r route) error {
	if m, err := a.k.mainRoute(ip, 0); err == nil && m.connected {
		if edge := subnetEdge(ip, m.prefix); edge != "" {
			return Errorf(ErrRefused, "%s: is the %s address of uplink subnet %s", ip, edge, m.prefix)
		}
	}
	return Errorf(ErrRefused, "%s: is a broadcast or anycast address of interface %s on this node", ip, a.k.linkName(r.dev))
}

// uplinkFor is the configured uplink, else the interface of the route to ip.
func (a *Assigner) uplinkFor(ip netip.Addr, r route) (Uplink, error) {
	if a.opts.Uplink != "" {
		return a.ups.byName(a.opts.Uplink)
	}
	if on := r.on(ip); on != 0 {
		// Already on the holder with no index entry (put there by hand, or
		// the index lost): the FIB hides the route, so look in the main
		// table, past the holder's own route.
		var err error
		if r, err = a.k.mainRoute(ip, on); err != nil {
			return Uplink{}, err
		}
	}
	if r.dev == 0 {
		return Uplink{}, Errorf(ErrRefused, "%s: no route to it to choose an uplink; set \"uplink\"", ip)
	}
	// Chosen from ip's route, so a fault of it (down, gone) is about ip.
	up, err := a.ups.byIndex(r.dev)
	return up, aboutIP(ip, err)
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

// place decides, under the lock, each IP's uplink and whether this ADD gives
// it its first holder. An IP that is already held keeps the uplink it was
// first announced on, so its proxy entry is removed from the right place.
func (a *Assigner) place(ips []netip.Addr, routes map[netip.Addr]route) ([]Placed, map[netip.Addr]string, error) {
	placed := make([]Placed, 0, len(ips))
	chosen := map[netip.Addr]string{}
	for _, ip := range ips {
		e, err := a.st.ReadIP(ip)
		if err != nil {
			return nil, nil, err
		}
		up, rechosen, err := a.placeIP(ip, e, routes[ip])
		if err != nil {
			return nil, nil, aboutIP(ip, err)
		}
		if rechosen {
			chosen[ip] = up.Name
		}
		placed = append(placed, Placed{Addr: ip, Uplink: up, First: len(e.Holders) == 0})
	}
	return placed, chosen, nil
}

// placeIP is ip's uplink: the one it was first announced on while it is
// held, else (also when that uplink vanished) the one its route names now,
// which the journal then records.
func (a *Assigner) placeIP(ip netip.Addr, e ipEntry, r route) (Uplink, bool, error) {
	if len(e.Holders) > 0 && e.Uplink != "" {
		up, err := a.ups.byName(e.Uplink)
		if !errors.Is(err, errNoLink) {
			return up, false, err
		}
		a.log.Warn("uplink of a held IP is gone; choosing another", "ip", ip, "uplink", e.Uplink)
	}
	up, err := a.uplinkFor(ip, r)
	return up, true, err
}

// uplinkCache resolves each uplink once per invocation.
type uplinkCache struct {
	k      kernel
	byIdx  map[int]Uplink
	byNick map[string]Uplink
}

func (c *uplinkCache) byName(name string) (Uplink, error) {
	if up, ok := c.byNick[name]; ok {
		return up, nil
	}
	up, err := c.k.uplinkByName(name)
	if err == nil {
		c.remember(up)
	}
	return up, err
}

func (c *uplinkCache) byIndex(index int) (Uplink, error) {
	if up, ok := c.byIdx[index]; ok {
		return up, nil
	}
	up, err := c.k.uplinkByIndex(index)
	if err == nil {
		c.remember(up)
	}
	return up, err
}

func (c *uplinkCache) remember(up Uplink) {
	if c.byIdx == nil {
		c.byIdx, c.byNick = map[int]Uplink{}, map[string]Uplink{}
	}
	c.byIdx[up.Index], c.byNick[up.Name] = up, up
}
