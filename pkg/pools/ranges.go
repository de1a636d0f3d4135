package pools

import (
	"net/netip"

	"github.com/external-ip/external-ip/pkg/pools/iprange"
)

// A pool's ranges are package iprange's, which the plugin links without
// this package's Kubernetes types.
type (
	Family = iprange.Family
	Range  = iprange.Range
	Ranges = iprange.Ranges
)

const (
	IPv4 = iprange.IPv4
	IPv6 = iprange.IPv6
)

// FamilyOf is ip's family.
func FamilyOf(ip netip.Addr) Family { return iprange.FamilyOf(ip) }

// ParseRanges reads spec.ranges (iprange.ParseRanges).
func ParseRanges(texts []string) (Ranges, error) { return iprange.ParseRanges(texts) }

// Overlap names the first range of a and of b that share an IP.
func Overlap(a, b Ranges) (mine, theirs string, ok bool) { return iprange.Overlap(a, b) }
