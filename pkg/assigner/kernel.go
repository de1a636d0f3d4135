package assigner

import (
	"errors"
	"net"
	"net/netip"
)

// Uplink is the interface an IP is announced on and reached through.
type Uplink struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
	// Router is the uplink's IPv6 forwarding setting, which the Router flag
	// of its neighbour advertisements must match.
	Router bool
}

// route is what the kernel's FIB says about one IP.
type route struct {
	// local is the index of the interface the IP is on, 0 if it is on none.
	local int
	// dev is the interface the node would send to the IP through.
	dev int
	// prefix is the matched route's destination; connected means on-link.
	prefix    netip.Prefix
	connected bool
	// special: the FIB holds ip as a broadcast or anycast address of an
	// interface (the subnet's broadcast, IPv6 subnet-router anycast). It
	// answers with a host route, so prefix is not the subnet.
	special bool
	// proto is the matched route's routing protocol number.
	proto int
}

// on is the interface that carries ip itself: the one it is an address of,
// else the one a host route without a gateway sends it to, which is how
// an IP held as a route is carried (by the holder); 0 for neither.
func (r route) on(ip netip.Addr) int {
	if r.local != 0 {
		return r.local
	}
	if r.connected && r.prefix.Bits() == ip.BitLen() {
		return r.dev
	}
	return 0
}

// holderLink is what the kernel says about the device named as the holder:
// the facts the assigner judges ownership by (see judge).
type holderLink struct {
	// Index is 0 when no device has the name.
	Index int
	// Kind is the link type: "dummy", "bridge", "veth", ...
	Kind  string
	Alias string
	Up    bool
	// Ports is a bridge's port count, counted only for a bridge.
	Ports int
}

// proxyEntry is one proxy neighbour entry of the node.
type proxyEntry struct {
	IP   netip.Addr
	Link string
}

// kernel is everything the assigner asks of the host. Each method is one
// netlink request or sysctl access, never a listing of addresses, except
// holderAddrs and proxyEntries which GC and status call (and CHECK, only to
// confirm an IP that the FIB does not show as local yet).
type kernel interface {
	// lookupHolder describes the device called name; it changes nothing.
	lookupHolder(name string) (holderLink, error)
	// createHolder makes the holder device name under the unique name temp,
	// marked with alias, NOARP, down. renameHolder then gives it its final
	// name, so that a device under the final name is never unmarked, and a
	// crash in between leaves only a device named temp.
	createHolder(name, temp, alias string) (int, error)
	// renameHolder fails with ErrRefused when name is taken.
	renameHolder(dev int, name string) error
	// removeHalfMade deletes the device called temp if it is a dummy or a
	// port-less bridge whose alias is empty or alias; it reports whether it
	// removed one.
	removeHalfMade(temp, alias string) (bool, error)
	// markHolder sets the holder's alias (an old-format one is migrated).
	markHolder(dev int, alias string) error
	setHolderUp(dev int) error
	// addAddr and delAddr report whether they changed anything.
	addAddr(dev int, ip netip.Addr) (bool, error)
	delAddr(dev int, ip netip.Addr) (bool, error)
	// linkName names an interface for messages.
	linkName(index int) string
	holderAddrs(dev int) ([]netip.Addr, error)
	// addRoute puts the host route ip dev <holder> proto proto in the main
	// table; addRoute and delRoute report whether they changed anything.
	addRoute(dev int, ip netip.Addr, proto int) (bool, error)
	delRoute(dev int, ip netip.Addr) (bool, error)
	// holderRoutes lists the main table's host routes through the holder,
	// each with its protocol number, in one filtered dump (GC and status).
	holderRoutes(dev int) (map[netip.Addr]int, error)
	lookup(ip netip.Addr) (route, error)
	// mainRoute is the longest-prefix route of the main table for ip that
	// is not through interface skip, for the IP that is already ours and so
	// hides the route it would otherwise take from lookup.
	mainRoute(ip netip.Addr, skip int) (route, error)
	uplinkByName(name string) (Uplink, error)
	uplinkByIndex(index int) (Uplink, error)
	// reachable says why the LAN could not reach an external IP of the
	// family held the way h says through up, if so.
	reachable(up Uplink, v6 bool, h heldAs) error
	// addProxy, delProxy and hasProxy work on the proxy neighbour entry of
	// ip's family (ARP or NDP); addProxy also makes the uplink answer
	// proxied solicitations at once.
	addProxy(uplink string, ip netip.Addr) error
	delProxy(uplink string, ip netip.Addr) error
	hasProxy(uplink string, ip netip.Addr) (bool, error)
	// proxyEntries lists every proxy neighbour entry of both families, on
	// every interface, in one dump.
	proxyEntries() ([]proxyEntry, error)
}

// errNoLink is in the chain of an uplink lookup that found no interface of
// that name or index: the uplink vanished, which a held IP survives by
// being re-homed (place, reconcile) rather than failing.
var errNoLink = errors.New("no such interface")
