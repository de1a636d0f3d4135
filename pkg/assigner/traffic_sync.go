package assigner

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
)

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

// reconcileNAT makes the table match the records both ways (GC and
// repair apply steer.Compare's result): missing rules come back, rules of
// gone attachments go. A rule for an IP that another holder device
// carries belongs to that device's state, and is left alone.
func (a *Assigner) reconcileNAT(recs map[string]*record) error {
	if a.opts.NAT == nil {
		return nil
	}
	w := steer.WantOf(recs)
	st, err := a.opts.NAT.Read()
	if err != nil || (!st.Present && w.Empty()) {
		return err
	}
	d := steer.Compare(w, st, a.ownsIP)
	if d.Broken != "" && !w.Empty() {
		if err := a.opts.NAT.Ensure(); err != nil {
			return err
		}
	}
	var errs []error
	for _, x := range d.Ingress {
		errs = append(errs, a.opts.NAT.SetIngress(x.IP, x.Want))
	}
	errs = append(errs, a.dropStrayIngress(d.StrayIngress, w.Held))
	for _, x := range d.Egress {
		errs = append(errs, a.opts.NAT.SetEgress(x.Key, x.Want))
	}
	for _, x := range d.StrayEgress {
		a.log.Info("stray egress rule removed", "source", x.Key.Source, "uplink", x.Key.Uplink, "ip", x.Got)
		errs = append(errs, a.opts.NAT.DelEgress(x.Key))
	}
	return errors.Join(append(errs, a.applyHairpins(d.Hairpin))...)
}

// dropStrayIngress removes the ingress rules of our IPs that no record
// steers, then forgets the flows they DNATed (once the table no longer
// steers to them, as steer does).
func (a *Assigner) dropStrayIngress(stray []steer.IngressDiff, held map[netip.Addr]bool) error {
	var errs []error
	for _, x := range stray {
		a.log.Info("stray ingress rule removed", "ip", x.IP)
		if err := a.opts.NAT.SetIngress(x.IP, nil); err != nil {
			errs = append(errs, err) // still steered: the next GC forgets
			continue
		}
		a.queue.Add(steer.StrayFlows(x.IP, x.Got, held[x.IP]))
	}
	return errors.Join(errs...)
}

// applyHairpins makes the hairpin sets hold the subnets the comparison
// keeps, in one change: a subnet replaced by a narrower one never leaves
// a gap.
func (a *Assigner) applyHairpins(ch nat.Change) error {
	for _, p := range ch.DelHairpin {
		a.log.Info("hairpin subnet no record needs removed", "subnet", p)
	}
	if len(ch.Hairpin)+len(ch.DelHairpin) == 0 {
		return nil
	}
	return a.opts.NAT.Apply(ch)
}

// ownsIP tells whether a rule for ip may be ours: ip is on our holder or
// on no interface at all, not on another holder device of another state.
func (a *Assigner) ownsIP(ip netip.Addr) bool {
	r, err := a.k.Lookup(ip)
	if err != nil {
		return false
	}
	dev, _ := a.holder.Find()
	on := r.On(ip)
	return on == 0 || on == dev
}

// checkNAT fails CHECK when a rule of rec is missing or points elsewhere:
// steer.Compare of the part of the table that rec's rules make, its
// steered IPs' ingress to the targets of all their holders (read from the
// index and their records).
func (a *Assigner) checkNAT(rec *record) error {
	if rec.Steering == nil || a.opts.NAT == nil {
		return nil
	}
	st, err := a.opts.NAT.Read()
	if err != nil {
		return err
	}
	holders, err := a.holdings(steer.Steered(rec), nil)
	if err != nil {
		return err
	}
	// What is stray is no one attachment's drift: status and GC see it.
	d := steer.Compare(steer.WantOfRecord(rec, holders), st, func(netip.Addr) bool { return false })
	return steer.Check(rec.Steering, d, func(ip netip.Addr) (string, error) {
		e, err := a.st.ReadIP(ip)
		return e.Uplink, err
	})
}

// readyNAT fails STATUS when nf_tables cannot serve this network's steering.
func (a *Assigner) readyNAT() error {
	if !a.steers() {
		return nil
	}
	if err := a.opts.NAT.Probe(); err != nil {
		return fmt.Errorf("traffic %s: %w", a.opts.Traffic, err)
	}
	return nil
}
