package iprange

import (
	"net/netip"

	"go4.org/netipx"
)

// Class is a class of address that no external IP may be: a pod given one
// would have a loopback, link-local, multicast or reserved address held
// for it on the node, which no LAN host routes to.
type Class struct {
	Prefix netip.Prefix
	What   string
}

// Unusable says which class of Classes r covers, the first in their order,
// "" when it covers none. A node-local pool of the plugin's config and a
// cluster's ExternalIPPool are both refused such a range, and so is a pool
// at `kubectl apply` (deploy/kubernetes/policy-pool-ranges.yaml, whose list
// a test holds to this one). The classes are those the plugin refuses a
// named IP of (package config, unusable), as ranges.
func Unusable(r Range) string {
	for _, c := range Classes() {
		if r.Cover.Overlaps(netipx.RangeOfPrefix(c.Prefix)) {
			return c.What
		}
	}
	return ""
}

// Classes are made when a pool is read, not at every start of the
// plugin, which links this package.
func Classes() []Class {
	return []Class{
		{netip.MustParsePrefix("0.0.0.0/32"), "the unspecified address"},
		{netip.MustParsePrefix("0.0.0.0/8"), `addresses of 0.0.0.0/8 ("this network")`},
		{netip.MustParsePrefix("127.0.0.0/8"), "loopback addresses"},
		{netip.MustParsePrefix("169.254.0.0/16"), "link-local addresses"},
		{netip.MustParsePrefix("224.0.0.0/4"), "multicast addresses"},
		{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
		{netip.MustParsePrefix("240.0.0.0/4"), "reserved addresses (240.0.0.0/4)"},
		{netip.MustParsePrefix("::/128"), "the unspecified address"},
		{netip.MustParsePrefix("::1/128"), "the loopback address"},
		{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6 addresses (::/96, deprecated)"},
		// Neither end of a range may be one (ParseRanges), but a range may
		// span them.
		{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped IPv6 addresses"},
		{netip.MustParsePrefix("fe80::/10"), "link-local addresses"},
		{netip.MustParsePrefix("ff00::/8"), "multicast addresses"},
	}
}
