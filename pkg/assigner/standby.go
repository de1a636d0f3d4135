package assigner

// Standby: an IP another node holds actively is held here in standby when
// the network says `standby: true`. Its record lists it in StandbyIPs, not
// IPs, and its index in Standby, not Holders, so that every path that puts
// an IP on the holder, steers or announces it sees only the active ones.
// The node's process (package standby) moves an attachment's IPs between
// the two with an ADD of its record whose InStandby says which.

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/host"
)

// standsBy says whether a probe's error holds ip in standby: another host
// answered for it and the network stands by.
func (ad *adding) standsBy(ip netip.Addr, err error) bool {
	var who *announce.Answered
	if !ad.opts.Standby || !errors.Is(err, announce.ErrConflict) || !errors.As(err, &who) {
		return false
	}
	ad.standby[ip] = true
	ad.log.Info("held in standby: another host holds it", "ip", ip, "active", who.MAC.String())
	return true
}

// active is the ADD's IPs held actively, in request order.
func (ad *adding) active() []netip.Addr {
	return slices.DeleteFunc(slices.Clone(ad.ips), func(ip netip.Addr) bool { return ad.standby[ip] })
}

// newRecord is the ADD's record: its active IPs, and those in standby
// apart.
func (ad *adding) newRecord() *record {
	rec := &record{Attachment: ad.att, IPs: ad.active(), Steering: ad.newSteering(), Route: ad.how, Standby: ad.opts.Standby}
	for _, ip := range ad.ips {
		if ad.standby[ip] {
			rec.StandbyIPs = append(rec.StandbyIPs, ip)
		}
	}
	return rec
}

// standingBy makes ip's index list only the standby holders waiting, for
// GC and repair: nothing of it is on the holder (a leftover is stray).
func (r *reconciling) standingBy(ip netip.Addr, e ipEntry, waiting []string) error {
	if len(e.Holders) == 0 && slices.Equal(e.Standby, waiting) && e.Uplink != "" {
		return nil
	}
	up := e.Uplink
	if up == "" || r.ups.Gone(up) {
		up = r.ups.Recover(ip)
	}
	return r.st.WriteIP(ip, ipEntry{Uplink: up, Standby: waiting, Route: e.Route})
}

// standby adds to ir the attachments holding it in standby (keys), and
// the drift of a standby IP: its index not listing them, or the IP on
// the holder while nobody here holds it actively.
func (r *reporting) standby(ir IPReport, keys []string, recs map[string]*record, c host.Carried) IPReport {
	slices.Sort(keys)
	for _, k := range keys {
		ir.Standby = append(ir.Standby, recs[k].Attachment)
	}
	e, err := r.st.ReadIP(ir.Addr)
	if err == nil && !slices.Equal(e.Standby, keys) {
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: index lists %d standby holders, records %d", ir.Addr, len(e.Standby), len(keys)))
	}
	if len(ir.Holders) == 0 && c.Holds(ir.Addr, e.Route) {
		r.rep.Drift = append(r.rep.Drift, fmt.Sprintf("%s: held in standby only but on %s", ir.Addr, r.opts.Device))
	}
	return ir
}
