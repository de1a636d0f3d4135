package assigner

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// hostKernel is the kernel seen through netlink and /proc/sys. It keeps one
// netlink socket for the invocation: a socket per request costs more than
// most of the requests themselves.
type hostKernel struct {
	handle *netlinksafe.Handle
	// index keeps the interface index of each uplink looked up, so that
	// its proxy entry needs no second lookup by name.
	index map[string]int
}

var _ kernel = (*hostKernel)(nil)

// nl opens the socket on first use, so that an invocation that needs no
// netlink (a DEL with nothing recorded) opens none. If it cannot be opened,
// each request falls back to a socket of its own.
func (k *hostKernel) nl() netlinksafe.Handle {
	if k.handle == nil {
		h, err := netlinksafe.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return netlinksafe.Handle{Handle: &netlink.Handle{}}
		}
		k.handle = &h
	}
	return *k.handle
}

func (k *hostKernel) lookupHolder(name string) (holderLink, error) {
	link, err := k.nl().LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return holderLink{}, nil
	case err != nil:
		return holderLink{}, Errorf(ErrHost, "looking up holder device %s: %w", name, err)
	}
	a := link.Attrs()
	h := holderLink{Index: a.Index, Kind: link.Type(), Alias: a.Alias, Up: a.Flags&net.FlagUp != 0}
	if h.Kind == "bridge" {
		if h.Ports, err = bridgePorts(a.Index); err != nil {
			return holderLink{}, Errorf(ErrHost, "listing ports of %s: %w", name, err)
		}
	}
	return h, nil
}

// createHolder makes a dummy device, or a bridge with no ports where the
// kernel has no dummy driver: both take addresses and forward nothing. A
// failure after the device exists removes it again: it is ours, named temp.
func (k *hostKernel) createHolder(name, temp, alias string) (int, error) {
	attrs := netlink.LinkAttrs{Name: temp}
	var link netlink.Link = &netlink.Dummy{LinkAttrs: attrs}
	err := k.nl().LinkAdd(link)
	if errors.Is(err, unix.EOPNOTSUPP) {
		link = &netlink.Bridge{LinkAttrs: attrs}
		err = k.nl().LinkAdd(link)
	}
	if err != nil {
		return 0, Errorf(ErrHost, "creating holder device %s (as %s): %w", name, temp, err)
	}
	if err := k.prepareHolder(link, alias); err != nil {
		if derr := k.nl().LinkDel(link); derr != nil {
			return 0, Errorf(ErrHost, "%v; removing %s again: %v", err, temp, derr)
		}
		return 0, err
	}
	return link.Attrs().Index, nil
}

func (k *hostKernel) prepareHolder(link netlink.Link, alias string) error {
	name := link.Attrs().Name
	if err := k.nl().LinkSetAlias(link, alias); err != nil {
		return Errorf(ErrHost, "marking holder device %s: %w", name, err)
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
		return Errorf(ErrHost, "setting holder device %s noarp: %w", name, err)
	}
	return nil
}

// renameHolder renames the holder while it is down, which every kernel
// allows (renaming an up device fails before Linux 6.2).
func (k *hostKernel) renameHolder(dev int, name string) error {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	err := k.nl().LinkSetName(link, name)
	if errors.Is(err, unix.EEXIST) {
		return Errorf(ErrRefused, "device %s: appeared while external-ip was making its holder there; choose another \"device\"", name)
	}
	if err != nil {
		return Errorf(ErrHost, "renaming holder device %d to %s: %w", dev, name, err)
	}
	return nil
}

func (k *hostKernel) removeHalfMade(temp, alias string) (bool, error) {
	h, err := k.lookupHolder(temp)
	if err != nil || h.Index == 0 {
		return false, err
	}
	if (h.Kind != "dummy" && h.Kind != "bridge") || h.Ports > 0 || (h.Alias != "" && h.Alias != alias) {
		return false, nil // not what createHolder makes: never ours to remove
	}
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: h.Index}}
	if err := k.nl().LinkDel(link); err != nil {
		return false, Errorf(ErrHost, "removing half-made holder device %s: %w", temp, err)
	}
	return true, nil
}

func (k *hostKernel) markHolder(dev int, alias string) error {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	if err := k.nl().LinkSetAlias(link, alias); err != nil {
		return Errorf(ErrHost, "marking holder device %d: %w", dev, err)
	}
	return nil
}

func (k *hostKernel) setHolderUp(dev int) error {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	if err := k.nl().LinkSetUp(link); err != nil {
		return Errorf(ErrHost, "setting holder device %d up: %w", dev, err)
	}
	return nil
}

// bridgePorts counts a bridge's ports with a link dump that the kernel
// filters by master, so its cost does not grow with the node's interfaces.
// The netlink library has no such filtered dump, so it goes on a socket of
// its own; lookupHolder's result is kept for the invocation, so this runs
// at most once per invocation.
func bridgePorts(index int) (int, error) {
	for range 3 {
		req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
		req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		req.AddData(nl.NewRtAttr(unix.IFLA_MASTER, nl.Uint32Attr(uint32(index))))
		msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			continue
		}
		return len(msgs), err
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

// addAddr adds without asking first: EEXIST is the cheap answer to "is it
// there already?", where a listing would cost milliseconds.
func (k *hostKernel) addAddr(dev int, ip netip.Addr) (bool, error) {
	err := k.nl().AddrAdd(holderAddr(dev, ip))
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, Errorf(ErrHost, "adding %s to holder device %d: %w", ip, dev, err)
	}
	return true, nil
}

func (k *hostKernel) delAddr(dev int, ip netip.Addr) (bool, error) {
	err := k.nl().AddrDel(holderAddr(dev, ip))
	if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.ENODEV) {
		return false, nil
	}
	if err != nil {
		return false, Errorf(ErrHost, "removing %s from holder device %d: %w", ip, dev, err)
	}
	return true, nil
}

// holderRoute is the host route that holds ip as a route: the main table,
// scope link (no gateway), through the holder.
func holderRoute(dev int, ip netip.Addr, proto int) *netlink.Route {
	return &netlink.Route{
		LinkIndex: dev,
		Dst:       &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())},
		Table:     unix.RT_TABLE_MAIN,
		Scope:     netlink.SCOPE_LINK,
		Protocol:  netlink.RouteProtocol(proto),
		Family:    family(ip),
	}
}

// addRoute adds without asking first, as addAddr does. EEXIST is a route
// to ip of the same metric in the main table: screening refused an IP
// whose host route goes anywhere but the holder, so it is ours.
func (k *hostKernel) addRoute(dev int, ip netip.Addr, proto int) (bool, error) {
	err := k.nl().RouteAdd(holderRoute(dev, ip, proto))
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, Errorf(ErrHost, "adding route %s dev %d proto %d: %w", ip, dev, proto, err)
	}
	return true, nil
}

// delRoute names no protocol, so it removes our route whatever number it
// was added with (the kernel matches a zero protocol to any).
func (k *hostKernel) delRoute(dev int, ip netip.Addr) (bool, error) {
	err := k.nl().RouteDel(holderRoute(dev, ip, 0))
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV) {
		return false, nil
	}
	if err != nil {
		return false, Errorf(ErrHost, "removing route %s dev %d: %w", ip, dev, err)
	}
	return true, nil
}

func (k *hostKernel) holderRoutes(dev int) (map[netip.Addr]int, error) {
	out := map[netip.Addr]int{}
	filter := &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: dev}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		var routes []netlink.Route
		err := retryDump(func() (err error) {
			routes, err = k.nl().RouteListFiltered(fam, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
			return err
		})
		if err != nil {
			return nil, Errorf(ErrHost, "listing routes through holder device %d: %w", dev, err)
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

func (k *hostKernel) linkName(index int) string {
	if link, err := k.nl().LinkByIndex(index); err == nil {
		return link.Attrs().Name
	}
	return fmt.Sprintf("index %d", index)
}

func (k *hostKernel) holderAddrs(dev int) ([]netip.Addr, error) {
	link := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Index: dev}}
	var addrs []netlink.Addr
	err := retryDump(func() (err error) {
		addrs, err = k.nl().AddrList(link, netlink.FAMILY_ALL)
		return err
	})
	if err != nil {
		return nil, Errorf(ErrHost, "listing addresses of holder device %d: %w", dev, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && !ip.IsLinkLocalUnicast() {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// lookup asks the FIB for the entry that matches ip (RTM_F_FIB_MATCH): for a
// local address it names the interface the address is on, otherwise the
// route and its interface. One request, whatever the number of addresses.
func (k *hostKernel) lookup(ip netip.Addr) (route, error) {
	routes, err := k.nl().RouteGetWithOptions(ip.AsSlice(), &netlink.RouteGetOptions{FIBMatch: true})
	if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) || (err == nil && len(routes) == 0) {
		return route{}, nil
	}
	if err != nil {
		return route{}, Errorf(ErrHost, "looking up the route to %s: %w", ip, err)
	}
	return toRoute(ip, routes[0]), nil
}

func toRoute(ip netip.Addr, r netlink.Route) route {
	out := route{dev: r.LinkIndex, proto: int(r.Protocol)}
	if r.Type == unix.RTN_LOCAL {
		out.local = r.LinkIndex
	}
	if r.Dst != nil {
		if p, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			ones, _ := r.Dst.Mask.Size()
			out.prefix = netip.PrefixFrom(p.Unmap(), ones)
		}
	} else {
		out.prefix = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		if ip.Is4() {
			out.prefix = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
	}
	out.connected = r.Gw == nil && r.Via == nil && r.Type == unix.RTN_UNICAST && out.prefix.Bits() > 0
	out.special = r.Type == unix.RTN_BROADCAST || r.Type == unix.RTN_ANYCAST
	return out
}

func (k *hostKernel) mainRoute(ip netip.Addr, skip int) (route, error) {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	filter := &netlink.Route{Table: unix.RT_TABLE_MAIN}
	routes, err := k.nl().RouteListFiltered(family, filter, netlink.RT_FILTER_TABLE)
	if err != nil {
		return route{}, Errorf(ErrHost, "listing routes for %s: %w", ip, err)
	}
	best, found := route{}, false
	for _, r := range routes {
		rt := toRoute(ip, r)
		if rt.prefix.Contains(ip) && r.LinkIndex != 0 && r.LinkIndex != skip && (!found || rt.prefix.Bits() > best.prefix.Bits()) {
			best, found = rt, true
		}
	}
	return best, nil
}

func (k *hostKernel) uplinkByName(name string) (Uplink, error) {
	link, err := k.nl().LinkByName(name)
	if err != nil {
		return Uplink{}, Errorf(ErrRefused, "uplink %s: %w", name, linkErr(err))
	}
	return k.toUplink(link)
}

func (k *hostKernel) uplinkByIndex(index int) (Uplink, error) {
	link, err := k.nl().LinkByIndex(index)
	if err != nil {
		return Uplink{}, Errorf(ErrRefused, "uplink with index %d: %w", index, linkErr(err))
	}
	return k.toUplink(link)
}

// linkErr turns the library's "link not found" into errNoLink, which the
// assigner tells apart from other failures.
func linkErr(err error) error {
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return errNoLink
	}
	return err
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

func (k *hostKernel) toUplink(link netlink.Link) (Uplink, error) {
	a := link.Attrs()
	if k.index == nil {
		k.index = map[string]int{}
	}
	k.index[a.Name] = a.Index
	if a.Flags&net.FlagUp == 0 {
		return Uplink{}, Errorf(ErrRefused, "uplink %s: is down", a.Name)
	}
	if len(a.HardwareAddr) != 6 {
		return Uplink{}, Errorf(ErrRefused, "uplink %s: has no Ethernet hardware address to announce from", a.Name)
	}
	fwd, err := sysctl("ipv6/conf/" + a.Name + "/forwarding")
	return Uplink{Name: a.Name, Index: a.Index, MAC: a.HardwareAddr, Router: err == nil && fwd > 0}, nil
}

// reachable checks the sysctls without which the kernel would not answer
// the LAN for an IP held the way h says.
func (k *hostKernel) reachable(up Uplink, v6 bool, h heldAs) error {
	switch {
	case v6:
		return needSysctl("ipv6/conf/"+up.Name+"/forwarding", "proxy NDP, which answers the LAN's neighbour solicitations for IPv6 external IPs, needs IPv6 forwarding on the uplink; external-ip does not turn it on")
	case h.Route():
		// arp_process answers for a proxy entry only on an interface that
		// forwards (IN_DEV_FORWARD), and then whatever arp_ignore says.
		return needSysctl("ipv4/conf/"+up.Name+"/forwarding", "proxy ARP, which answers the LAN's ARP requests for external IPs held as routes, needs IPv4 forwarding on the uplink; external-ip does not turn it on")
	}
	for _, dev := range []string{"all", up.Name} {
		key := "ipv4/conf/" + dev + "/arp_ignore"
		v, err := sysctl(key)
		if err != nil {
			return Errorf(ErrHost, "reading %s: %w", key, err)
		}
		if v != 0 {
			return Errorf(ErrUnreachable, "net.%s is %d: the kernel would not answer ARP for external IPs on the holder device; set it to 0, or hold them as routes (\"hold\": \"route\")", dotted(key), v)
		}
	}
	return nil
}

// needSysctl fails with why when the switch key is off.
func needSysctl(key, why string) error {
	v, err := sysctl(key)
	if err != nil {
		return Errorf(ErrHost, "reading %s: %w", key, err)
	}
	if v == 0 {
		return Errorf(ErrUnreachable, "net.%s is 0: %s", dotted(key), why)
	}
	return nil
}

func dotted(key string) string { return strings.ReplaceAll(key, "/", ".") }

// enableProxy makes the uplink answer solicitations for proxied addresses
// of ip's family (IPv6 needs proxy_ndp; IPv4's entries need no switch) and
// at once (proxy_delay 0) rather than after a random delay of up to 0.8 s:
// both arp_process and ndisc_recv_ns queue a broadcast solicitation for a
// proxy entry unless the delay is 0.
func enableProxy(uplink string, ip netip.Addr) error {
	type setting struct {
		path string
		want int
	}
	todo := []setting{{"ipv4/neigh/" + uplink + "/proxy_delay", 0}}
	if ip.Is6() {
		todo = []setting{{"ipv6/conf/" + uplink + "/proxy_ndp", 1}, {"ipv6/neigh/" + uplink + "/proxy_delay", 0}}
	}
	for _, s := range todo {
		if v, err := sysctl(s.path); err == nil && v == s.want {
			continue
		}
		if err := os.WriteFile("/proc/sys/net/"+s.path, []byte(strconv.Itoa(s.want)), 0o644); err != nil {
			return Errorf(ErrHost, "setting net.%s to %d: %w", dotted(s.path), s.want, err)
		}
	}
	return nil
}

func family(ip netip.Addr) int {
	if ip.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func (k *hostKernel) proxyNeigh(uplink string, ip netip.Addr) (*netlink.Neigh, error) {
	index, ok := k.index[uplink]
	if !ok {
		link, err := k.nl().LinkByName(uplink)
		if err != nil {
			return nil, linkErr(err)
		}
		index = link.Attrs().Index
	}
	return &netlink.Neigh{
		LinkIndex: index,
		Family:    family(ip),
		Flags:     netlink.NTF_PROXY,
		IP:        ip.AsSlice(),
	}, nil
}

// addProxy looks the uplink up first, so that a vanished one is errNoLink
// rather than a failed sysctl write.
func (k *hostKernel) addProxy(uplink string, ip netip.Addr) error {
	n, err := k.proxyNeigh(uplink, ip)
	if err == nil {
		err = enableProxy(uplink, ip)
		if err != nil {
			return err
		}
		err = k.nl().NeighAdd(n)
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return Errorf(ErrHost, "adding proxy neighbour %s on %s: %w", ip, uplink, err)
	}
	return nil
}

func (k *hostKernel) delProxy(uplink string, ip netip.Addr) error {
	n, err := k.proxyNeigh(uplink, ip)
	if errors.Is(err, errNoLink) {
		return nil // the uplink went, and its entries with it
	}
	if err == nil {
		err = k.nl().NeighDel(n)
	}
	// ENODEV: the uplink went since this invocation looked it up.
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENODEV) {
		return Errorf(ErrHost, "removing proxy neighbour %s on %s: %w", ip, uplink, err)
	}
	return nil
}

func (k *hostKernel) hasProxy(uplink string, ip netip.Addr) (bool, error) {
	link, err := k.nl().LinkByName(uplink)
	if err != nil {
		return false, Errorf(ErrDrift, "uplink %s of %s: %w", uplink, ip, linkErr(err))
	}
	entries, err := k.nl().NeighProxyList(link.Attrs().Index, family(ip))
	if err != nil {
		return false, Errorf(ErrHost, "listing proxy neighbours on %s: %w", uplink, err)
	}
	for _, e := range entries {
		if got, ok := netip.AddrFromSlice(e.IP); ok && got.Unmap() == ip {
			return true, nil
		}
	}
	return false, nil
}

func (k *hostKernel) proxyEntries() ([]proxyEntry, error) {
	var entries []netlink.Neigh
	err := retryDump(func() (err error) {
		entries, err = k.nl().NeighProxyList(0, netlink.FAMILY_ALL)
		return err
	})
	if err != nil {
		return nil, Errorf(ErrHost, "listing proxy neighbours: %w", err)
	}
	names := map[int]string{}
	out := make([]proxyEntry, 0, len(entries))
	for _, e := range entries {
		ip, ok := netip.AddrFromSlice(e.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if _, known := names[e.LinkIndex]; !known {
			names[e.LinkIndex] = k.linkName(e.LinkIndex)
		}
		out = append(out, proxyEntry{IP: ip, Link: names[e.LinkIndex]})
	}
	return out, nil
}

func sysctl(key string) (int, error) {
	b, err := os.ReadFile("/proc/sys/net/" + key)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", key, b)
	}
	return v, nil
}
