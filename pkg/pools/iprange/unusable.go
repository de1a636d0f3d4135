package iprange

import (
	"net/netip"

	"go4.org/netipx"
)

// Unusable says which class of address no external IP may be of that r
// covers, "" when it covers none. A node-local pool of the plugin's
// config and a cluster's ExternalIPPool are both refused such a range: a
// pod given one of its IPs would have a loopback, link-local, multicast or
// reserved address held for it on the node, which no LAN host routes to.
// The classes are those the plugin refuses a named IP of (package config,
// unusable), as ranges.
func Unusable(r Range) string {
	for _, u := range unusableRanges() {
		if r.Cover.Overlaps(netipx.RangeOfPrefix(u.prefix)) {
			return u.what
		}
	}
	return ""
}

// unusableRanges is made when a pool is read, not at every start of the
// plugin, which links this package.
func unusableRanges() []unusableRange {
	return []unusableRange{
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
		{netip.MustParsePrefix("fe80::/10"), "link-local addresses"},
		{netip.MustParsePrefix("ff00::/8"), "multicast addresses"},
	}
}

type unusableRange struct {
	prefix netip.Prefix
	what   string
}
