package assigner

import (
	"errors"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// followReHomed moves, right after an ADD, everything of the other holders
// of each IP the ADD re-homed (wasOn: the held IPs whose uplink place
// chose anew) to the uplink the IP leaves by now: their egress rules and
// their uplink marks, the IP's own and their container addresses'. Until
// then their flows leave by the new uplink unmatched, masqueraded, or are
// marked for the old uplink's table. Only the IP's holders are read, and
// only when a held IP was re-homed, so a plain ADD walks no records.
func (ad *adding) followReHomed(self string) error {
	if ad.opts.NAT == nil {
		return nil
	}
	recs, err := ad.otherHolders(self, slices.Collect(maps.Keys(ad.wasOn)))
	if err != nil || len(recs) == 0 {
		return err
	}
	was, needed, err := ad.steeringOf(recs, ad.wasOn)
	if err != nil {
		return err
	}
	if err := ad.followUplinks(recs); err != nil {
		return err
	}
	now, needs, err := ad.steeringOf(recs, nil)
	if err != nil {
		return err
	}
	return ad.move(steer.MovedEgress(was, now), uplinkroute.Moved(needed, needs))
}

// steeringOf is each of recs' egress rules, and what they all need of the
// uplink marking, their IPs on the uplinks the index has, but where on
// says otherwise.
func (ad *adding) steeringOf(recs map[string]*record, on map[netip.Addr]string) (map[string][]egressRule, []uplinkroute.Need, error) {
	egress := map[string][]egressRule{}
	var needs []uplinkroute.Need
	for key, r := range recs {
		egress[key] = slices.Clone(steer.EgressOf(r.Steering))
		uplinks, err := ad.uplinksOf(r, on)
		if err != nil {
			return nil, nil, err
		}
		needs = append(needs, uplinkroute.Needs(r.Steering, r.IPs, uplinks)...)
	}
	return egress, needs, nil
}

// move applies ch, the other holders' moved egress, with what rc moves of
// their uplink marking, in one transaction (under the node lock where the
// marking changes), and settles the routing after it.
func (ad *adding) move(ch nat.Change, rc uplinkroute.Change) error {
	var p uplinkroute.Plan
	if ad.router != nil {
		defer ad.router.Release()
		var err error
		if p, err = ad.router.Change(rc); err != nil {
			return err
		}
	}
	var unmarked bool
	p.Into(&ch, &unmarked)
	if len(ch.Egress)+len(ch.DelEgress)+len(ch.UplinkMark)+len(ch.UplinkAdd)+len(ch.UplinkDel)+len(ch.UplinkUnmark) == 0 {
		return nil
	}
	if err := ad.opts.NAT.Apply(ch); err != nil || ad.router == nil {
		return err
	}
	return ad.router.Settle(p, ch)
}

// otherHolders reads the records, other than self's, of ips' holders:
// the IPs this ADD re-homed, or the IP an egress rule leaves from.
func (ad *adding) otherHolders(self string, ips []netip.Addr) (map[string]*record, error) {
	recs := map[string]*record{}
	for _, ip := range ips {
		e, err := ad.st.ReadIP(ip)
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

// uplinksOf is the uplink of each of r's IPs as its index entry has it,
// but where on says otherwise.
func (a *Assigner) uplinksOf(r *record, on map[netip.Addr]string) (map[netip.Addr]string, error) {
	out := map[netip.Addr]string{}
	for _, ip := range r.IPs {
		if up, ok := on[ip]; ok {
			out[ip] = up
			continue
		}
		e, err := a.st.ReadIP(ip)
		if err != nil {
			return nil, err
		}
		out[ip] = e.Uplink
	}
	return out, nil
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
		uplinks, err := a.uplinksOf(r, nil)
		if err != nil {
			return err
		}
		if eg := steer.EgressVia(r.Steering, r.IPs, uplinks); !slices.Equal(eg, r.Steering.Egress) {
			a.log.Info("egress follows a re-homed IP", "attachment", key, "egress", eg)
			r.Steering.Egress = eg
			errs = append(errs, a.st.WriteRecord(key, r))
		}
	}
	return errors.Join(errs...)
}
