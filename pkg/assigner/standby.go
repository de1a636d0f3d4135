package assigner

// Standby: an IP another node holds actively is held here in standby when
// the network says `standby: true`; package standing keeps the books (the
// record lists it in StandbyIPs, its index in Standby), so that every path
// that puts an IP on the holder, steers or announces it sees only the
// active ones. The node's process (package standby) moves an attachment's
// IPs between the two with an ADD of its record whose InStandby says which.

import (
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/standing"
)

// standsBy says whether a probe's error holds ip in standby.
func (ad *adding) standsBy(ip netip.Addr, err error) bool {
	mac, ok := ad.standby.Probed(ad.opts.Standby, ip, err)
	if ok {
		ad.log.Info("held in standby: another host holds it", "ip", ip, "active", mac.String())
	}
	return ok
}

// cutOff holds ip in standby when its network stands by and its uplink has
// no carrier: no probe could hear an active node, and holding it actively
// would make a second one when the carrier comes. The node's watch takes
// it over once its checks go unanswered on a live uplink.
func (ad *adding) cutOff(ip netip.Addr, up host.Uplink) bool {
	if !ad.opts.Standby || !up.NoCarrier {
		return false
	}
	ad.standby[ip] = true
	ad.log.Info("held in standby: its uplink has no carrier to probe on", "ip", ip, "uplink", up.Name)
	return true
}

// standingBy makes ip's index list only the standby holders waiting, for
// GC and repair: nothing of it is on the holder (a leftover is stray).
func (r *reconciling) standingBy(ip netip.Addr, e ipEntry, waiting []string) error {
	up := e.Uplink
	if up == "" || r.ups.Gone(up) {
		up = r.ups.Recover(ip)
	}
	if want, same := standing.Waiting(e, waiting, up); !same {
		return r.st.WriteIP(ip, want)
	}
	return nil
}

// standby adds to ir the attachments holding it in standby (keys), and
// the drift of a standby IP (standing.Drift).
func (r *reporting) standby(ir IPReport, keys []string, recs map[string]*record, c host.Carried) IPReport {
	slices.Sort(keys)
	for _, k := range keys {
		ir.Standby = append(ir.Standby, recs[k].Attachment)
	}
	e, err := r.st.ReadIP(ir.Addr)
	if err == nil {
		r.rep.Drift = append(r.rep.Drift, standing.Drift(ir.Addr, e, keys, len(ir.Holders) > 0, c.Holds(ir.Addr, e.Route), r.opts.Device)...)
	}
	return ir
}
