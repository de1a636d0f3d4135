package assigner

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
)

// followReHomed moves, right after an ADD, the egress of the other holders
// of each IP the ADD re-homed (rechosen: the IPs whose uplink place chose
// anew) to the uplink the IP leaves by now: until then their flows leave
// by the new uplink unmatched, masqueraded. Only the IP's holders are read,
// and only when a held IP was re-homed, so a plain ADD walks no records.
func (a *Assigner) followReHomed(self string, placed []Placed, rechosen map[netip.Addr]string) error {
	if a.opts.NAT == nil {
		return nil
	}
	recs, err := a.otherHolders(self, placed, rechosen)
	if err != nil || len(recs) == 0 {
		return err
	}
	was := map[string][]egressRule{}
	for key, r := range recs {
		was[key] = slices.Clone(egressOf(r.Steering))
	}
	if err := a.followUplinks(recs); err != nil {
		return err
	}
	ch := nat.Change{Egress: map[nat.EgressKey]netip.Addr{}}
	for _, key := range slices.Sorted(maps.Keys(recs)) {
		if now := egressOf(recs[key].Steering); !slices.Equal(now, was[key]) {
			moved := ownChange(&steering{Egress: now}, []*steering{{Egress: was[key]}})
			ch.DelEgress = append(ch.DelEgress, moved.DelEgress...)
			maps.Copy(ch.Egress, moved.Egress)
		}
	}
	// A key another record now has must stay: Apply deletes after it sets.
	ch.DelEgress = slices.DeleteFunc(ch.DelEgress, func(k nat.EgressKey) bool { _, kept := ch.Egress[k]; return kept })
	if len(ch.Egress)+len(ch.DelEgress) == 0 {
		return nil
	}
	return a.opts.NAT.Apply(ch)
}

// otherHolders reads the records, other than self's, of the IPs that
// already had holders when this ADD re-chose their uplink.
func (a *Assigner) otherHolders(self string, placed []Placed, rechosen map[netip.Addr]string) (map[string]*record, error) {
	recs := map[string]*record{}
	for _, p := range placed {
		if _, ok := rechosen[p.Addr]; !ok || p.First {
			continue
		}
		e, err := a.st.ReadIP(p.Addr)
		if err != nil {
			return nil, err
		}
		for _, key := range e.Holders {
			if key == self || recs[key] != nil {
				continue
			}
			r, err := a.st.ReadRecord(key)
			if err != nil {
				return nil, err
			}
			if r != nil {
				recs[key] = r
			}
		}
	}
	return recs, nil
}
