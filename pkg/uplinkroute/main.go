package uplinkroute

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// mainRoutes lists the main table of a family, once per invocation. It
// goes over the strict socket: otherwise the kernel dumps every table,
// the local one with a route per external IP held as an address.
func (r *Routes) mainRoutes(v6 bool) ([]netlink.Route, error) {
	if r.main == nil {
		r.main = map[bool][]netlink.Route{}
	}
	if rs, ok := r.main[v6]; ok {
		return rs, nil
	}
	rs, err := r.tableRoutes(families[fam(v6)], unix.RT_TABLE_MAIN)
	if err != nil {
		return nil, err
	}
	r.main[v6] = rs
	return rs, nil
}

// viaKey names the routes of a family through one interface.
type viaKey struct {
	v6    bool
	index int
}

// routesVia lists the main table's routes of a family through index,
// multipath ones included, once per invocation. With strict checking
// the kernel sends only those: not the main table's route per external
// IP held as a route, which every ADD would otherwise read.
func (r *Routes) routesVia(v6 bool, index int) ([]netlink.Route, error) {
	k := viaKey{v6, index}
	if rs, ok := r.via[k]; ok {
		return rs, nil
	}
	h, err := r.tables()
	if err != nil {
		return nil, err
	}
	var rs []netlink.Route
	err = r.retryDump(func() (err error) {
		// The index goes to the kernel (RTA_OIF), which also matches a
		// multipath route by any of its hops; filtering here too would
		// drop those, so only the table is filtered here (a socket
		// without strict checking gets every route, and gatewayVia sorts).
		rs, err = h.RouteListFiltered(families[fam(v6)], &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: index}, netlink.RT_FILTER_TABLE)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing the main table's routes through interface %d: %w", index, err)
	}
	if r.via == nil {
		r.via = map[viaKey][]netlink.Route{}
	}
	r.via[k] = rs
	return rs, nil
}

// farAway are destinations that, on most nodes, only a default route
// covers (240.0.0.0/4 is reserved, 3fff::/20 is for documentation).
var farAway = [2]net.IP{net.ParseIP("255.255.255.254"), net.ParseIP("3fff:fff::1")}

// DefaultUplink is the interface index of the main table's default route
// of the family (the one of lowest metric the kernel can use), 0 when
// there is none.
func (r *Routes) DefaultUplink(v6 bool) (int, error) {
	if dev, ok := r.lookupDefault(v6); ok {
		return dev, nil
	}
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

// lookupDefault asks the kernel which route it takes to farAway: when
// that is a unicast default route of the main table, it is the default
// route. Anything else (a route that covers farAway, another table's by
// a rule) is left to the listing of the main table; no route at all is
// no default route. One lookup
// costs some 8 us whatever the table holds, where the listing costs 0.5
// ms (IPv4) to 1 ms (IPv6) more per 1,000 IPs held as routes (measured
// in a namespace, 4 Dec): every steered ADD asks.
func (r *Routes) lookupDefault(v6 bool) (int, bool) {
	h, err := r.nl()
	if err != nil {
		return 0, false
	}
	rs, err := h.RouteGetWithOptions(farAway[fam(v6)], &netlink.RouteGetOptions{FIBMatch: true})
	if errors.Is(err, unix.ENETUNREACH) {
		// No route at all reaches it: there is no default route the
		// kernel can use. Listing the main table instead made every
		// steered ADD on such a node (the bench's) read the route of
		// each IP held as a route.
		return 0, true
	}
	if err != nil || len(rs) != 1 {
		return 0, false
	}
	rt := rs[0]
	if rt.Table != unix.RT_TABLE_MAIN || rt.Type != unix.RTN_UNICAST || (rt.Dst != nil && !isDefault(rt.Dst)) {
		return 0, false
	}
	dev := routeDev(rt)
	return dev, dev != 0 // no interface named: the listing tells
}

// Gateway is the gateway through which index reaches beyond its link:
// the main table's default route through it (of lowest metric), else the
// gateway of the longest route through it that contains ip (the route
// the external IP's own network is reached through). Invalid: none.
func (r *Routes) Gateway(index int, ip netip.Addr) (netip.Addr, error) {
	rs, err := r.routesVia(ip.Is6(), index)
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
