package localpool

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/pools/iprange"
	"github.com/external-ip/external-ip/pkg/store"
)

// Pool is a pool as a request draws from it.
type Pool struct {
	Name   string
	Ranges iprange.Ranges
}

// Picked is what Pick chose: one IP of each family asked, in their order,
// and which of them are given afresh, which no other attachment may hold
// (Rules.Given); the others the attachment's record already owned (a
// re-ADD keeps what it was given).
type Picked struct {
	IPs, Given []netip.Addr
}

// Pick chooses one IP of each family in fams for the attachment with key:
// the one its record already owns in the pool and holds, shared or not
// (a sibling of its owner may name it, and the attachment keeps it),
// else the first IP of the pool that nobody holds and skip (the
// container's own addresses, IPs other hosts answered for) does not
// refuse. It reads the state once and changes nothing: the ADD's Check,
// under its own lock, finds out whether another ADD took the IP meanwhile.
func Pick(st store.Reader, key string, p Pool, fams []iprange.Family, skip func(netip.Addr) bool) (Picked, error) {
	kept, err := keptIPs(st, key, p)
	if err != nil {
		return Picked{}, err
	}
	indexed, err := st.Indexed()
	if err != nil {
		return Picked{}, err
	}
	held := make(map[netip.Addr]bool, len(indexed))
	for _, ip := range indexed {
		held[ip] = true
	}
	var out Picked
	for _, f := range fams {
		if i := slices.IndexFunc(kept, func(ip netip.Addr) bool { return iprange.FamilyOf(ip) == f }); i >= 0 {
			out.IPs = append(out.IPs, kept[i])
			continue
		}
		ip, ok := firstFree(p.Ranges, f, held, skip)
		if !ok {
			return Picked{}, exhausted(p, f, held)
		}
		out.IPs, out.Given = append(out.IPs, ip), append(out.Given, ip)
	}
	return out, nil
}

// keptIPs are the IPs of the pool that the attachment's record owns and
// that it holds: others holding them too are siblings of its owner, which
// Rules.Check saw when they joined.
func keptIPs(st store.Reader, key string, p Pool) ([]netip.Addr, error) {
	rec, err := st.ReadRecord(key)
	if err != nil || rec == nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ip := range rec.Owned {
		if !p.Ranges.Covers(ip) {
			continue
		}
		e, err := st.ReadIP(ip)
		if err != nil {
			return nil, err
		}
		if slices.Contains(e.Holders, key) {
			out = append(out, ip)
		}
	}
	return out, nil
}

// firstFree is the pool's first IP of family f that is not held or
// skipped. Each IP it passes over is held or skipped, so it looks at no
// more IPs than there are of those, plus one, however large the pool.
func firstFree(rs iprange.Ranges, f iprange.Family, held map[netip.Addr]bool, skip func(netip.Addr) bool) (netip.Addr, bool) {
	size := rs.Size(f)
	for n := uint64(0); n < size; n++ {
		ip := rs.At(f, n)
		if !held[ip] && (skip == nil || !skip(ip)) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func exhausted(p Pool, f iprange.Family, held map[netip.Addr]bool) error {
	n := 0
	for ip := range held {
		if iprange.FamilyOf(ip) == f && p.Ranges.Covers(ip) {
			n++
		}
	}
	return errorf(ErrExhausted, "pool %s has no free %s address (%d of %d held)", p.Name, f, n, p.Ranges.Size(f))
}
