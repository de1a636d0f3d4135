package host

import (
	"errors"
	"net"
	"net/netip"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/store"
)

// The kinds of error this package returns; test with errors.Is. The
// plugin maps each to a CNI error code in one place.
var (
	// ErrHost: the kernel refused a change (plugin code 100).
	ErrHost = errkind.Host
	// ErrRefused: the holder device or an uplink cannot be used (CNI 7).
	ErrRefused = errkind.Refused
	// ErrDrift: an uplink CHECK asks about is gone (plugin code 104).
	ErrDrift = errkind.Drift
	// ErrUnreachable: a sysctl keeps the LAN from reaching the IP (plugin
	// code 102).
	ErrUnreachable = errors.New("unreachable")
	// ErrNoLink is in the chain of an uplink lookup that found no
	// interface of that name or index: the uplink vanished, which a held
	// IP survives by being re-homed rather than failing.
	ErrNoLink = errors.New("no such interface")
)

func errorf(kind error, format string, args ...any) error {
	return errkind.Errorf(kind, format, args...)
}

// Uplink is the interface an IP is announced on and reached through.
type Uplink struct {
	Name  string
	Index int
	MAC   net.HardwareAddr
	// Router is the uplink's IPv6 forwarding setting, which the Router flag
	// of its neighbour advertisements must match.
	Router bool
	// Down says the interface is administratively down: Uplinks refuses it
	// but to a move, which sends nothing on it.
	Down bool
	// NoCarrier says the interface is up but not running (operstate other
	// than up or unknown): frames sent go nowhere and no answer comes, so
	// a probe proves nothing.
	NoCarrier bool
}

// Route is what the kernel's FIB says about one IP.
type Route struct {
	// Local is the index of the interface the IP is on, 0 if it is on none.
	Local int
	// Dev is the interface the node would send to the IP through.
	Dev int
	// Prefix is the matched route's destination; Connected means on-link.
	Prefix    netip.Prefix
	Connected bool
	// Special: the FIB holds ip as a broadcast or anycast address of an
	// interface (the subnet's broadcast, IPv6 subnet-router anycast). It
	// answers with a host route, so Prefix is not the subnet.
	Special bool
	// Proto is the matched route's routing protocol number; Gateway its
	// gateway (invalid: none), Table its table and Metric its metric.
	Proto   int
	Gateway netip.Addr
	Table   int
	Metric  int
}

// On is the interface that carries ip itself: the one it is an address of,
// else the one a host route without a gateway sends it to, which is how
// an IP held as a route is carried (by the holder); 0 for neither.
func (r Route) On(ip netip.Addr) int {
	if r.Local != 0 {
		return r.Local
	}
	if r.Connected && r.Prefix.Bits() == ip.BitLen() {
		return r.Dev
	}
	return 0
}

// Link is what the kernel says about the device named as the holder: the
// facts its ownership is judged by (see Holder.Judge).
type Link struct {
	// Index is 0 when no device has the name.
	Index int
	// Kind is the link type: "dummy", "bridge", "veth", ...
	Kind  string
	Alias string
	Up    bool
	// Ports is a bridge's port count, counted only for a bridge.
	Ports int
}

// ProxyEntry is one proxy neighbour entry of the node.
type ProxyEntry struct {
	IP   netip.Addr
	Link string
}

// NeedsProxy says whether the LAN reaches ip, held the way h says, only
// through a proxy entry on its uplink: every IP held as a route, and IPv6
// addresses (Linux answers solicitations only for addresses of the
// receiving interface).
func NeedsProxy(ip netip.Addr, h store.HeldAs) bool { return ip.Is6() || h.Route() }

// Kernel is everything asked of the host's links, addresses, routes,
// proxy entries and sysctls; Netlink is the host's, the tests give a fake.
// Each method is one netlink request or sysctl access, never a listing of
// addresses, except HolderAddrs and ProxyEntries which GC and status call
// (and CHECK, only to confirm an IP that the FIB does not show as local
// yet).
type Kernel interface {
	// LookupHolder describes the device called name; it changes nothing.
	LookupHolder(name string) (Link, error)
	// CreateHolder makes the holder device name under the unique name
	// temp, marked with alias, NOARP, down. RenameHolder then gives it its
	// final name, so that a device under the final name is never unmarked,
	// and a crash in between leaves only a device named temp.
	CreateHolder(name, temp, alias string) (int, error)
	// RenameHolder fails with ErrRefused when name is taken.
	RenameHolder(dev int, name string) error
	// RemoveHalfMade deletes the device called temp if it is a dummy or a
	// port-less bridge whose alias is empty or alias; it reports whether
	// it removed one.
	RemoveHalfMade(temp, alias string) (bool, error)
	// MarkHolder sets the holder's alias (an old-format one is migrated).
	MarkHolder(dev int, alias string) error
	SetHolderUp(dev int) error
	// AddAddr and DelAddr report whether they changed anything.
	AddAddr(dev int, ip netip.Addr) (bool, error)
	DelAddr(dev int, ip netip.Addr) (bool, error)
	// LinkName names an interface for messages.
	LinkName(index int) string
	// OtherHolders says whether a device other than skip carries a
	// holder's mark (HolderMark): another state's, in one dump of the links.
	OtherHolders(skip int) (bool, error)
	HolderAddrs(dev int) ([]netip.Addr, error)
	// AddRoute puts the host route ip dev <holder> proto proto in the main
	// table; AddRoute and DelRoute report whether they changed anything.
	AddRoute(dev int, ip netip.Addr, proto int) (bool, error)
	DelRoute(dev int, ip netip.Addr) (bool, error)
	// HolderRoutes lists the main table's host routes through the holder,
	// each with its protocol number, in one filtered dump (GC and status).
	HolderRoutes(dev int) (map[netip.Addr]int, error)
	Lookup(ip netip.Addr) (Route, error)
	// MainRoute is the longest-prefix route of the main table for ip that
	// is not through interface skip, for the IP that is already ours and so
	// hides the route it would otherwise take from Lookup.
	MainRoute(ip netip.Addr, skip int) (Route, error)
	UplinkByName(name string) (Uplink, error)
	UplinkByIndex(index int) (Uplink, error)
	// Reachable says why the LAN could not reach an external IP of the
	// family held the way h says through up, if so.
	Reachable(up Uplink, v6 bool, h store.HeldAs) error
	// AddProxy, DelProxy and HasProxy work on the proxy neighbour entry of
	// ip's family (ARP or NDP); AddProxy also makes the uplink answer
	// proxied solicitations at once.
	AddProxy(uplink string, ip netip.Addr) error
	DelProxy(uplink string, ip netip.Addr) error
	HasProxy(uplink string, ip netip.Addr) (bool, error)
	// ProxyEntries lists every proxy neighbour entry of both families, on
	// every interface, in one dump.
	ProxyEntries() ([]ProxyEntry, error)
}
