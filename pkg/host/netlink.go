package host

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Netlink is the kernel seen through netlink and /proc/sys. It keeps its
// netlink sockets for the invocation, a socket per request costing more
// than most of the requests themselves: its own (rtConn) for the lookups
// an ADD and a DEL make (holder, uplink, a bridge's ports, a proxy
// entry), the netlink library's for the rest, each opened on first use.
type Netlink struct {
	handle *netlinksafe.Handle
	// own is this package's socket for the requests it parses itself.
	own *rtConn
	// index keeps the interface index of each uplink looked up, so that
	// its proxy entry needs no second lookup by name.
	index map[string]int
}

var _ Kernel = (*Netlink)(nil)

// Close closes the socket, if one was opened: a long-running caller (the
// node's upkeep, a Netlink per device and round) must, or it leaks a
// socket a round.
func (k *Netlink) Close() {
	if k.handle != nil {
		k.handle.Close()
		k.handle = nil
	}
	if k.own != nil {
		k.own.close()
		k.own = nil
	}
}

// rt opens this package's own socket on first use (rtConn).
func (k *Netlink) rt() (*rtConn, error) {
	if k.own == nil {
		c, err := openRT()
		if err != nil {
			return nil, err
		}
		k.own = c
	}
	return k.own, nil
}

// nl opens the socket on first use, so that an invocation that needs no
// netlink (a DEL with nothing recorded) opens none. If it cannot be opened,
// each request falls back to a socket of its own.
func (k *Netlink) nl() netlinksafe.Handle {
	if k.handle == nil {
		h, err := netlinksafe.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return netlinksafe.Handle{Handle: &netlink.Handle{}}
		}
		k.handle = &h
	}
	return *k.handle
}

func (k *Netlink) LookupHolder(name string) (Link, error) {
	l, err := k.getLink(name, 0)
	switch {
	case errors.Is(err, ErrNoLink):
		return Link{}, nil
	case err != nil:
		return Link{}, errorf(ErrHost, "looking up holder device %s: %w", name, err)
	}
	h := Link{Index: l.index, Kind: l.kind, Alias: l.alias, Up: l.flags&unix.IFF_UP != 0}
	if h.Kind == "bridge" {
		if h.Ports, err = k.bridgePorts(l.index); err != nil {
			return Link{}, errorf(ErrHost, "listing ports of %s: %w", name, err)
		}
	}
	return h, nil
}

func (k *Netlink) OtherHolders(skip int) (bool, error) {
	links, err := k.nl().LinkList()
	if err != nil {
		return false, errorf(ErrHost, "listing interfaces: %w", err)
	}
	for _, l := range links {
		if a := l.Attrs(); a.Index != skip && strings.HasPrefix(a.Alias, HolderMark) {
			return true, nil
		}
	}
	return false, nil
}

// CreateHolder makes a dummy device, or a bridge with no ports where the
// kernel has no dummy driver: both take addresses and forward nothing. A
// failure after the device exists removes it again: it is ours, named temp.
func (k *Netlink) CreateHolder(name, temp, alias string) (int, error) {
	attrs := netlink.LinkAttrs{Name: temp}
	var link netlink.Link = &netlink.Dummy{LinkAttrs: attrs}
	err := k.nl().LinkAdd(link)
	if errors.Is(err, unix.EOPNOTSUPP) {
		link = &netlink.Bridge{LinkAttrs: attrs}
		err = k.nl().LinkAdd(link)
	}
	if err != nil {
		return 0, errorf(ErrHost, "creating holder device %s (as %s): %w", name, temp, err)
	}
	if err := k.prepareHolder(link, alias); err != nil {
		if derr := k.nl().LinkDel(link); derr != nil {
			return 0, errorf(ErrHost, "%v; removing %s again: %v", err, temp, derr)
		}
		return 0, err
	}
	return link.Attrs().Index, nil
}

func (k *Netlink) prepareHolder(link netlink.Link, alias string) error {
	name := link.Attrs().Name
	if err := k.nl().LinkSetAlias(link, alias); err != nil {
		return errorf(ErrHost, "marking holder device %s: %w", name, err)
	}
	// No link-local address: the holder talks to nobody. Best effort, since
	// a kernel without IPv6 has no such setting.
	os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/addr_gen_mode", []byte("1"), 0o644)
	// NOARP, as a dummy is: without it a bridge joins a multicast group per
	// IPv6 address and every address added walks them all, which grows with
	// the addresses held (figures: docs/performance.md, "Figures behind
	// design choices"). The LAN is answered on
	// the uplink, whose flags these are not.
	if err := k.nl().LinkSetARPOff(link); err != nil {
		return errorf(ErrHost, "setting holder device %s noarp: %w", name, err)
	}
	return nil
}

// RenameHolder renames the holder while it is down, which every kernel
// allows (renaming an up device fails before Linux 6.2).
func (k *Netlink) RenameHolder(dev int, name string) error {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	err := k.nl().LinkSetName(link, name)
	if errors.Is(err, unix.EEXIST) {
		return errorf(ErrRefused, "device %s: appeared while external-ip was making its holder there; choose another \"device\"", name)
	}
	if err != nil {
		return errorf(ErrHost, "renaming holder device %d to %s: %w", dev, name, err)
	}
	return nil
}

func (k *Netlink) RemoveHalfMade(temp, alias string) (bool, error) {
	h, err := k.LookupHolder(temp)
	if err != nil || h.Index == 0 {
		return false, err
	}
	if (h.Kind != "dummy" && h.Kind != "bridge") || h.Ports > 0 || (h.Alias != "" && h.Alias != alias) {
		return false, nil // not what createHolder makes: never ours to remove
	}
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: h.Index}}
	if err := k.nl().LinkDel(link); err != nil {
		return false, errorf(ErrHost, "removing half-made holder device %s: %w", temp, err)
	}
	return true, nil
}

func (k *Netlink) MarkHolder(dev int, alias string) error {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	if err := k.nl().LinkSetAlias(link, alias); err != nil {
		return errorf(ErrHost, "marking holder device %d: %w", dev, err)
	}
	return nil
}

func (k *Netlink) SetHolderUp(dev int) error {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	if err := k.nl().LinkSetUp(link); err != nil {
		return errorf(ErrHost, "setting holder device %d up: %w", dev, err)
	}
	return nil
}

// bridgePorts counts a bridge's ports with a link dump that the kernel
// filters by master, so its cost does not grow with the node's interfaces.
// The netlink library has no such filtered dump, so it goes on this
// package's own socket; lookupHolder's result is kept for the invocation,
// so this runs at most once per invocation.
func (k *Netlink) bridgePorts(index int) (int, error) {
	c, err := k.rt()
	if err != nil {
		return 0, err
	}
	for range 3 {
		req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
		req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		req.AddData(nl.NewRtAttr(unix.IFLA_MASTER, nl.Uint32Attr(uint32(index))))
		ports := 0
		err := c.execute(req, func(m syscall.NetlinkMessage) {
			if m.Header.Type == unix.RTM_NEWLINK {
				ports++
			}
		})
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			continue
		}
		return ports, err
	}
	return 0, netlink.ErrDumpInterrupted
}

// infinite is the kernel's "forever" for an address lifetime.
const infinite = 0xffffffff

func holderAddr(dev int, ip netip.Addr) (netlink.Link, *netlink.Addr) {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}}
	if ip.Is6() {
		// No DAD: the probe already asked the LAN. Preferred lifetime 0 so
		// that the node never picks it as a source address. No prefix route:
		// a /128 route per IP would grow the main table.
		addr.Flags = unix.IFA_F_NODAD | unix.IFA_F_NOPREFIXROUTE
		addr.PreferedLft, addr.ValidLft = 0, infinite
	}
	return link, addr
}

// AddAddr adds without asking first: EEXIST is the cheap answer to "is it
// there already?", where a listing would cost milliseconds.
func (k *Netlink) AddAddr(dev int, ip netip.Addr) (bool, error) {
	err := k.nl().AddrAdd(holderAddr(dev, ip))
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, errorf(ErrHost, "adding %s to holder device %d: %w", ip, dev, err)
	}
	return true, nil
}

func (k *Netlink) DelAddr(dev int, ip netip.Addr) (bool, error) {
	err := k.nl().AddrDel(holderAddr(dev, ip))
	if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENODEV) {
		return false, nil
	}
	if err != nil {
		return false, errorf(ErrHost, "removing %s from holder device %d: %w", ip, dev, err)
	}
	return true, nil
}

// holderRoute is the host route that holds ip as a route: the main table,
// scope link (no gateway), through the holder.
func holderRoute(dev int, ip netip.Addr, proto int) *netlink.Route {
	return &netlink.Route{
		LinkIndex: dev,
		Dst:       &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())},
		Table:     mainTable,
		Scope:     netlink.SCOPE_LINK,
		Protocol:  netlink.RouteProtocol(proto),
		Family:    family(ip),
	}
}

// mainTable is the table our routes are in.
const mainTable = unix.RT_TABLE_MAIN

// ourMetric is the metric the kernel gives a route added without one, as
// ours are: IPv6 routes get IP6_RT_PRIO_USER.
func ourMetric(ip netip.Addr) int {
	if ip.Is6() {
		return 1024
	}
	return 0
}

// AddRoute adds without asking first, as AddAddr does. EEXIST is a route
// to ip of the same metric in the main table: ours when held already, or
// another program's, which Hold tells apart.
func (k *Netlink) AddRoute(dev int, ip netip.Addr, proto int) (bool, error) {
	err := k.nl().RouteAdd(holderRoute(dev, ip, proto))
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, errorf(ErrHost, "adding route %s dev %d proto %d: %w", ip, dev, proto, err)
	}
	return true, nil
}

// DelRoute names no protocol, so it removes our route whatever number it
// was added with (the kernel matches a zero protocol to any).
func (k *Netlink) DelRoute(dev int, ip netip.Addr) (bool, error) {
	err := k.nl().RouteDel(holderRoute(dev, ip, 0))
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		return false, nil
	}
	if err != nil {
		return false, errorf(ErrHost, "removing route %s dev %d: %w", ip, dev, err)
	}
	return true, nil
}

func (k *Netlink) HolderRoutes(dev int) (map[netip.Addr]int, error) {
	out := map[netip.Addr]int{}
	filter := &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: dev}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		var routes []netlink.Route
		err := retryDump(func() (err error) {
			routes, err = k.nl().RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
			return err
		})
		if err != nil {
			return nil, errorf(ErrHost, "listing routes through holder device %d: %w", dev, err)
		}
		for _, r := range routes {
			if r.Dst == nil || r.Gw != nil {
				continue
			}
			ip, ok := netip.AddrFromSlice(r.Dst.IP)
			if ones, bits := r.Dst.Mask.Size(); ok && ones == bits && !ip.IsLinkLocalUnicast() && !ip.IsMulticast() {
				out[ip.Unmap()] = int(r.Protocol)
			}
		}
	}
	return out, nil
}

func (k *Netlink) LinkName(index int) string {
	if link, err := k.nl().LinkByIndex(index); err == nil {
		return link.Attrs().Name
	}
	return fmt.Sprintf("index %d", index)
}

func (k *Netlink) HolderAddrs(dev int) ([]netip.Addr, error) {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	var addrs []netlink.Addr
	err := retryDump(func() (err error) {
		addrs, err = k.nl().AddrList(link, netlink.FAMILY_ALL)
		return err
	})
	if err != nil {
		return nil, errorf(ErrHost, "listing addresses of holder device %d: %w", dev, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && !ip.IsLinkLocalUnicast() {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// Lookup asks the FIB for the entry that matches ip (RTM_F_FIB_MATCH): for a
// local address it names the interface the address is on, otherwise the
// route and its interface. One request, whatever the number of addresses.
func (k *Netlink) Lookup(ip netip.Addr) (Route, error) {
	routes, err := k.nl().RouteGetWithOptions(ip.AsSlice(), &netlink.RouteGetOptions{FIBMatch: true})
	if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) || (err == nil && len(routes) == 0) {
		return Route{}, nil
	}
	if err != nil {
		return Route{}, errorf(ErrHost, "looking up the route to %s: %w", ip, err)
	}
	return toRoute(ip, routes[0]), nil
}

func toRoute(ip netip.Addr, r netlink.Route) Route {
	out := Route{Dev: r.LinkIndex, Proto: int(r.Protocol), Table: r.Table, Metric: r.Priority}
	if gw, ok := netip.AddrFromSlice(r.Gw); ok {
		out.Gateway = gw.Unmap()
	}
	if r.Type == unix.RTN_LOCAL {
		out.Local = r.LinkIndex
	}
	if r.Dst != nil {
		if p, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			ones, _ := r.Dst.Mask.Size()
			out.Prefix = netip.PrefixFrom(p.Unmap(), ones)
		}
	} else {
		out.Prefix = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		if ip.Is4() {
			out.Prefix = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
	}
	out.Connected = r.Gw == nil && r.Via == nil && r.Type == unix.RTN_UNICAST && out.Prefix.Bits() > 0
	out.Special = r.Type == unix.RTN_BROADCAST || r.Type == unix.RTN_ANYCAST
	return out
}

func (k *Netlink) MainRoute(ip netip.Addr, skip int) (Route, error) {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	filter := &netlink.Route{Table: unix.RT_TABLE_MAIN}
	routes, err := k.nl().RouteListFiltered(family, filter, netlink.RT_FILTER_TABLE)
	if err != nil {
		return Route{}, errorf(ErrHost, "listing routes for %s: %w", ip, err)
	}
	best, found := Route{}, false
	for _, r := range routes {
		rt := toRoute(ip, r)
		if rt.Prefix.Contains(ip) && r.LinkIndex != 0 && r.LinkIndex != skip && (!found || rt.Prefix.Bits() > best.Prefix.Bits()) {
			best, found = rt, true
		}
	}
	return best, nil
}

func (k *Netlink) UplinkByName(name string) (Uplink, error) {
	l, err := k.getLink(name, 0)
	if err != nil {
		return Uplink{}, errorf(ErrRefused, "uplink %s: %w", name, err)
	}
	return k.toUplink(l)
}

func (k *Netlink) UplinkByIndex(index int) (Uplink, error) {
	l, err := k.getLink("", index)
	if err != nil {
		return Uplink{}, errorf(ErrRefused, "uplink with index %d: %w", index, err)
	}
	return k.toUplink(l)
}

// retryDump repeats a dump that a concurrent change interrupted, as
// netlinksafe does for the calls it wraps.
func retryDump(f func() error) error {
	var err error
	for range 3 {
		if err = f(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return err
		}
	}
	return err
}

func (k *Netlink) toUplink(l linkMsg) (Uplink, error) {
	if k.index == nil {
		k.index = map[string]int{}
	}
	k.index[l.name] = l.index
	if len(l.mac) != 6 {
		return Uplink{}, errorf(ErrRefused, "uplink %s: has no Ethernet hardware address to announce from", l.name)
	}
	fwd, err := sysctl("ipv6/conf/" + l.name + "/forwarding")
	return Uplink{Name: l.name, Index: l.index, MAC: l.mac, Router: err == nil && fwd > 0,
		Down: l.flags&unix.IFF_UP == 0, NoCarrier: l.oper != uint8(netlink.OperUp) && l.oper != uint8(netlink.OperUnknown)}, nil
}
