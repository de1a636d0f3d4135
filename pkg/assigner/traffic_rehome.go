package assigner

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/steer"
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
		was[key] = slices.Clone(steer.EgressOf(r.Steering))
	}
	if err := a.followUplinks(recs); err != nil {
		return err
	}
	now := map[string][]egressRule{}
	for key, r := range recs {
		now[key] = steer.EgressOf(r.Steering)
	}
	ch := steer.MovedEgress(was, now)
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
