package uplinkroute

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// mainRoutes lists the main table of a family, once per invocation.
func (r *Routes) mainRoutes(v6 bool) ([]netlink.Route, error) {
	if r.main == nil {
		r.main = map[bool][]netlink.Route{}
	}
	if rs, ok := r.main[v6]; ok {
		return rs, nil
	}
	h, err := r.nl()
	if err != nil {
		return nil, err
	}
	rs, err := h.RouteListFiltered(families[fam(v6)], &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing the main table: %w", err)
	}
	r.main[v6] = rs
	return rs, nil
}

// DefaultUplink is the interface index of the main table's default route
// of the family (the one of lowest metric), 0 when there is none.
func (r *Routes) DefaultUplink(v6 bool) (int, error) {
	rs, err := r.mainRoutes(v6)
	if err != nil {
		return 0, err
	}
	best, dev := -1, 0
	for _, rt := range rs {
		if (rt.Dst == nil || isDefault(rt.Dst)) && rt.Type == unix.RTN_UNICAST && (best < 0 || rt.Priority < best) {
			best, dev = rt.Priority, routeDev(rt)
		}
	}
	return dev, nil
}

// Gateway is the gateway through which index reaches beyond its link:
// the main table's default route through it (of lowest metric), else the
// gateway of the longest route through it that contains ip (the route
// the external IP's own network is reached through). Invalid: none.
func (r *Routes) Gateway(index int, ip netip.Addr) (netip.Addr, error) {
	rs, err := r.mainRoutes(ip.Is6())
	if err != nil {
		return netip.Addr{}, err
	}
	var def, best netip.Addr
	defMetric, bestBits := -1, -1
	for _, rt := range rs {
		gw, ok := gatewayVia(rt, index)
		if !ok {
			continue
		}
		if rt.Dst == nil || isDefault(rt.Dst) {
			if defMetric < 0 || rt.Priority < defMetric {
				def, defMetric = gw, rt.Priority
			}
			continue
		}
		p, ok := netip.AddrFromSlice(rt.Dst.IP)
		ones, _ := rt.Dst.Mask.Size()
		if ok && netip.PrefixFrom(p.Unmap(), ones).Contains(ip) && ones > bestBits {
			best, bestBits = gw, ones
		}
	}
	if def.IsValid() {
		return def, nil
	}
	return best, nil
}

// gatewayVia is rt's gateway when it leaves through index.
func gatewayVia(rt netlink.Route, index int) (netip.Addr, bool) {
	if rt.LinkIndex == index && rt.Gw != nil {
		gw, ok := netip.AddrFromSlice(rt.Gw)
		return gw.Unmap(), ok
	}
	for _, nh := range rt.MultiPath {
		if nh.LinkIndex == index && nh.Gw != nil {
			gw, ok := netip.AddrFromSlice(nh.Gw)
			return gw.Unmap(), ok
		}
	}
	return netip.Addr{}, false
}

func routeDev(rt netlink.Route) int {
	if rt.LinkIndex == 0 && len(rt.MultiPath) > 0 {
		return rt.MultiPath[0].LinkIndex
	}
	return rt.LinkIndex
}
