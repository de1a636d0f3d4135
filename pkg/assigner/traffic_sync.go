package assigner

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
)

// followUplinks moves each record's egress rules to the uplinks its IPs
// leave by now, as the index has them (GC re-homes an IP whose uplink
// vanished): the table, CHECK and DEL then go by the uplink the flows take.
func (a *Assigner) followUplinks(recs map[string]*record) error {
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(recs)) {
		r := recs[key]
		if len(egressOf(r.Steering)) == 0 {
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
		if eg := egressVia(r.Steering, r.IPs, uplinks); !slices.Equal(eg, r.Steering.Egress) {
			a.log.Info("egress follows a re-homed IP", "attachment", key, "egress", eg)
			r.Steering.Egress = eg
			errs = append(errs, a.st.WriteRecord(key, r))
		}
	}
	return errors.Join(errs...)
}

// reconcileNAT makes the table match the records both ways (GC and
// repair apply compareNAT's result): missing rules come back, rules of
// gone attachments go. A rule for an IP that another holder device
// carries belongs to that device's state, and is left alone.
func (a *Assigner) reconcileNAT(recs map[string]*record) error {
	if a.opts.NAT == nil {
		return nil
	}
	w := wantNAT(recs)
	st, err := a.opts.NAT.Read()
	if err != nil || (!st.Present && w.empty()) {
		return err
	}
	d := compareNAT(w, st, a.ownsIP)
	if d.broken != "" && !w.empty() {
		if err := a.opts.NAT.Ensure(); err != nil {
			return err
		}
	}
	var errs []error
	for _, x := range d.ingress {
		errs = append(errs, a.opts.NAT.SetIngress(x.ip, x.want))
	}
	errs = append(errs, a.dropStrayIngress(d.strayIngress, w.held))
	for _, x := range d.egress {
		errs = append(errs, a.opts.NAT.SetEgress(x.key, x.want))
	}
	for _, x := range d.strayEgress {
		a.log.Info("stray egress rule removed", "source", x.key.Source, "uplink", x.key.Uplink, "ip", x.got)
		errs = append(errs, a.opts.NAT.DelEgress(x.key))
	}
	return errors.Join(append(errs, a.applyHairpins(d.hairpin))...)
}

// dropStrayIngress removes the ingress rules of our IPs that no record
// steers, then forgets the flows they DNATed (once the table no longer
// steers to them, as steer does).
func (a *Assigner) dropStrayIngress(stray []ingressDiff, held map[netip.Addr]bool) error {
	var errs []error
	for _, x := range stray {
		a.log.Info("stray ingress rule removed", "ip", x.ip)
		if err := a.opts.NAT.SetIngress(x.ip, nil); err != nil {
			errs = append(errs, err) // still steered: the next GC forgets
			continue
		}
		a.queueForget(strayFlows(x.ip, x.got, held[x.ip]))
	}
	return errors.Join(errs...)
}

// strayFlows are the flows to ip DNATed to the stray rule's targets.
// Only an IP no record holds loses every flow: one held for egress alone
// carries the container's flows SNATed from it, which must live on.
func strayFlows(ip netip.Addr, targets []netip.Addr, held bool) []gone {
	if !held {
		return []gone{{ip: ip}}
	}
	var out []gone
	for _, t := range targets {
		out = append(out, gone{ip, t})
	}
	return out
}

// applyHairpins makes the hairpin sets hold hairpinPlan's subnets, in one
// change: a subnet replaced by a narrower one never leaves a gap.
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
// compareNAT of the part of the table that rec's rules make.
func (a *Assigner) checkNAT(rec *record) error {
	s := rec.Steering
	if s == nil || a.opts.NAT == nil {
		return nil
	}
	st, err := a.opts.NAT.Read()
	if err != nil {
		return err
	}
	w, err := a.recordWant(rec)
	if err != nil {
		return err
	}
	// What is stray is no one attachment's drift: status and GC see it.
	d := compareNAT(w, st, func(netip.Addr) bool { return false })
	if d.broken != "" {
		return Errorf(ErrDrift, "nftables table inet %s: %s", nat.TableName, d.broken)
	}
	if err := checkIngress(rec, d.ingress); err != nil {
		return err
	}
	if err := a.checkEgressUplinks(rec); err != nil {
		return err
	}
	if len(d.egress) > 0 {
		x := d.egress[0]
		return Errorf(ErrDrift, "%s: egress via %s is not from %s in table inet %s (it is %v)", x.key.Source, x.key.Uplink, x.want, nat.TableName, x.got)
	}
	for _, h := range s.Hairpin {
		if slices.Contains(d.unserved, h.Source.Masked()) {
			return Errorf(ErrDrift, "%s: no hairpin rule for its subnet %s in table inet %s", h.Target, h.Source.Masked(), nat.TableName)
		}
	}
	return nil
}

// recordWant is the part of the table that rec's rules make: its IPs'
// ingress, to the targets of all their holders (read from the index and
// their records), its egress and its hairpin subnets.
func (a *Assigner) recordWant(rec *record) (natWant, error) {
	w := newNATWant()
	var steered []netip.Addr
	for _, ip := range rec.IPs {
		if _, ok := targetOf(rec.Steering, ip); ok {
			steered = append(steered, ip)
		}
	}
	holders, err := a.holdings(steered, nil)
	if err != nil {
		return w, err
	}
	for ip, hs := range holders {
		w.ingress[ip] = ingressTargets(ip, hs)
	}
	for _, e := range rec.Steering.Egress {
		w.egress[nat.EgressKey{Source: e.Source, Uplink: e.Uplink}] = e.IP
	}
	for _, h := range rec.Steering.Hairpin {
		w.hairpin[h.Source.Masked()] = true
	}
	return w, nil
}

// checkIngress fails when an IP of rec does not steer to rec's target, or
// also steers to a target that none of the IP's holders has: a share of
// the new flows would go elsewhere. Another holder's missing target is
// that holder's drift.
func checkIngress(rec *record, diffs []ingressDiff) error {
	for _, x := range diffs {
		t, _ := targetOf(rec.Steering, x.ip)
		if !slices.Contains(x.got, t) {
			return Errorf(ErrDrift, "%s: no ingress rule to %s in table inet %s (it steers to %v)", x.ip, t, nat.TableName, x.got)
		}
		for _, g := range x.got {
			if !slices.Contains(x.want, g) {
				return Errorf(ErrDrift, "%s: ingress rule also steers to %s, which no holder has, in table inet %s", x.ip, g, nat.TableName)
			}
		}
	}
	return nil
}

// checkEgressUplinks fails when an egress rule of rec names an uplink its
// IP no longer leaves by (re-homed since): the flows take the new uplink,
// which the rule does not match.
func (a *Assigner) checkEgressUplinks(rec *record) error {
	for _, r := range rec.Steering.Egress {
		e, err := a.st.ReadIP(r.IP)
		if err != nil {
			return err
		}
		// An index with no uplink (lost, not yet recovered) tells nothing.
		if e.Uplink != "" && e.Uplink != r.Uplink {
			return Errorf(ErrDrift, "%s: egress rule from %s names uplink %s, but %s now leaves via %s", r.Source, r.IP, r.Uplink, r.IP, e.Uplink)
		}
	}
	return nil
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
