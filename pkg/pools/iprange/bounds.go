package iprange

import (
	"fmt"
	"net/netip"
	"strings"
)

// Key spells ip so that comparing two keys as strings compares the IPs,
// IPv4 before IPv6: "4" and the four octets in three decimal digits each,
// or "6" and the eight groups in four hex digits each. The admission
// policy computes the same spelling in CEL, which has no order on IPs.
func Key(ip netip.Addr) string {
	if ip.Is4() {
		b := ip.As4()
		return fmt.Sprintf("4%03d.%03d.%03d.%03d", b[0], b[1], b[2], b[3])
	}
	b := ip.As16()
	groups := make([]string, 8)
	for i := range groups {
		groups[i] = fmt.Sprintf("%02x%02x", b[2*i], b[2*i+1])
	}
	return "6" + strings.Join(groups, ":")
}

// Bounds are the pool's ranges for the admission policy: for each range
// the keys of its first and last IP, "first-last", comma-separated.
func (rs Ranges) Bounds() string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = Key(r.Cover.From()) + "-" + Key(r.Cover.To())
	}
	return strings.Join(out, ",")
}
