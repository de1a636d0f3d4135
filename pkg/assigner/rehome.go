package assigner

import (
	"errors"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/steer"
)

// followReHomed moves, right after an ADD, the egress of the other holders
// of each IP the ADD re-homed (rechosen: the IPs whose uplink place chose
// anew) to the uplink the IP leaves by now: until then their flows leave
// by the new uplink unmatched, masqueraded. Only the IP's holders are read,
// and only when a held IP was re-homed, so a plain ADD walks no records.
func (ad *adding) followReHomed(self string, rechosen map[netip.Addr]string) error {
	if ad.opts.NAT == nil {
		return nil
	}
	recs, err := ad.otherHolders(self, rechosen)
	if err != nil || len(recs) == 0 {
		return err
	}
	was := map[string][]egressRule{}
	for key, r := range recs {
		was[key] = slices.Clone(steer.EgressOf(r.Steering))
	}
	if err := ad.followUplinks(recs); err != nil {
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
	return ad.opts.NAT.Apply(ch)
}

// otherHolders reads the records, other than self's, of the IPs that
// already had holders when this ADD re-chose their uplink.
func (ad *adding) otherHolders(self string, rechosen map[netip.Addr]string) (map[string]*record, error) {
	recs := map[string]*record{}
	for _, p := range ad.placed {
		if _, ok := rechosen[p.Addr]; !ok || p.First {
			continue
		}
		e, err := ad.st.ReadIP(p.Addr)
		if err != nil {
			return nil, err
		}
		for _, key := range e.Holders {
			if key == self || recs[key] != nil {
				continue
			}
			r, err := ad.st.ReadRecord(key)
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

// followUplinks moves each record's egress rules to the uplinks its IPs
// leave by now, as the index has them (GC re-homes an IP whose uplink
// vanished): the table, CHECK and DEL then go by the uplink the flows take.
func (a *Assigner) followUplinks(recs map[string]*record) error {
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(recs)) {
		r := recs[key]
		if len(steer.EgressOf(r.Steering)) == 0 {
			continue
		}
		uplinks := map[netip.Addr]string{}
		for _, ip := range r.IPs {
			e, err := a.st.ReadIP(ip)
			if err != nil {
				return err
			}
			uplinks[ip] = e.Uplink
		}
		if eg := steer.EgressVia(r.Steering, r.IPs, uplinks); !slices.Equal(eg, r.Steering.Egress) {
			a.log.Info("egress follows a re-homed IP", "attachment", key, "egress", eg)
			r.Steering.Egress = eg
			errs = append(errs, a.st.WriteRecord(key, r))
		}
	}
	return errors.Join(errs...)
}
