package assigner

import (
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
}

// kernel is everything the assigner asks of the host. Each method is one
// netlink request or sysctl access, never a listing of addresses, except
// holderAddrs which only GC and status call.
type kernel interface {
	// holder finds the holder device and returns its index, 0 when missing.
	// create makes a missing one; adopt marks an unmarked one that a crash
	// left half made. A device that is not ours is ErrRefused.
	holder(name string, create, adopt bool) (int, error)
	// holderUp reports whether the holder is administratively up.
	holderUp(dev int) (bool, error)
	// addAddr and delAddr report whether they changed anything.
	addAddr(dev int, ip netip.Addr) (bool, error)
	delAddr(dev int, ip netip.Addr) (bool, error)
	// linkName names an interface for messages.
	linkName(index int) string
	holderAddrs(dev int) ([]netip.Addr, error)
	lookup(ip netip.Addr) (route, error)
	// mainRoute is the longest-prefix route of the main table for ip, for
	// the rare IP that is already local and so hides its route from lookup.
	mainRoute(ip netip.Addr) (route, error)
	uplinkByName(name string) (Uplink, error)
	uplinkByIndex(index int) (Uplink, error)
	// reachable says why the LAN could not reach an external IP of the
	// family through up, if so.
	reachable(up Uplink, v6 bool) error
	addProxy(uplink string, ip netip.Addr) error
	delProxy(uplink string, ip netip.Addr) error
	hasProxy(uplink string, ip netip.Addr) (bool, error)
}
