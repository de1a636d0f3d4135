// Package host is the node's kernel as the assigner asks it: links,
// addresses, host routes, proxy neighbour entries and sysctls (Kernel,
// over netlink and /proc/sys in Netlink; the tests give a fake), and the
// holder device that carries the external IPs (Holder).
//
// It owns the holder device: made under a temporary name, marked by its
// alias (which names the dataDir that owns it: a second dataDir on the
// same device is refused) and renamed once marked, so that a device under
// the final name is never unmarked and never adopted on the strength of a
// marker; a creation a crash cut short is removed by the next call. It
// screens an IP before anything changes (one already on another
// interface, a subnet's network or broadcast address, one the LAN could
// not reach), chooses its uplink, puts it on the holder as an address or
// a host route with the proxy entry the LAN needs, and takes it off.
//
// It never adds or removes an address or route on any interface but the
// holder, never manages a device it did not create, never takes over
// another program's host route to an IP (it refuses the IP: Screen, and
// Hold when the kernel says a route is there) nor removes a proxy entry
// that was there before the IP needed one (store.IPEntry.KeepProxy, found
// by ProxyThere), and never lists
// addresses on the ADD or DEL path (Carried and Sweep are GC's and
// status's, CheckOn asks only when the FIB does not yet show an IP),
// because listing costs milliseconds per thousand addresses. It decides
// nothing about who holds what: the reference counts and the journal are
// package assigner's, which tells it what to hold and release.
package host
