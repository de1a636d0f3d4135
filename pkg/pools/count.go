package pools

import "net/netip"

// Count is one pool's numbers, for its status and the metrics.
type Count struct {
	Pool       string
	Size, Used int64
}

// Free is what is left, at least 0.
func (c Count) Free() int64 { return max(c.Size-c.Used, 0) }

// Outside says whether a claim's address (spec.address) lies outside the
// pool's ranges as they are now: an edit shrank them since the pool gave
// it. Ranges that do not parse leave it in doubt, and a doubt keeps it
// (false).
func (p *Pool) Outside(address string) bool {
	ip, err := netip.ParseAddr(address)
	return p.Ranges != nil && err == nil && !p.Ranges.Covers(ip)
}
