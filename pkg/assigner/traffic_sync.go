package assigner

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
)

// natWant is the whole table as the records say it should be.
type natWant struct {
	ingress map[netip.Addr][]netip.Addr
	egress  map[nat.EgressKey]netip.Addr
	hairpin map[netip.Prefix]bool // container subnets
}

func (w natWant) empty() bool {
	return len(w.ingress)+len(w.egress)+len(w.hairpin) == 0
}

// wantNAT derives the table from every record, targets in the order of
// their holders' keys, as steerIP orders them from the index.
func wantNAT(recs map[string]*record) natWant {
	w := natWant{ingress: map[netip.Addr][]netip.Addr{}, egress: map[nat.EgressKey]netip.Addr{}, hairpin: map[netip.Prefix]bool{}}
	ks := make([]string, 0, len(recs))
	for k := range recs {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	for _, k := range ks {
		s := recs[k].Steering
		if s == nil {
			continue
		}
		for _, ip := range recs[k].IPs {
			if t, ok := targetOf(s, ip); ok && !slices.Contains(w.ingress[ip], t) {
				w.ingress[ip] = append(w.ingress[ip], t)
			}
		}
		for _, r := range s.Egress {
			w.egress[nat.EgressKey{Source: r.Source, Uplink: r.Uplink}] = r.IP
		}
		for _, h := range s.Hairpin {
			w.hairpin[h.Source.Masked()] = true
		}
	}
	return w
}

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

// reconcileNAT makes the table match the records both ways: missing rules
// come back, rules of gone attachments go. A rule for an IP that another
// holder device carries belongs to that device's state, and is left alone.
func (a *Assigner) reconcileNAT(recs map[string]*record) error {
	if a.opts.NAT == nil {
		return nil
	}
	w := wantNAT(recs)
	st, err := a.opts.NAT.Read()
	if err != nil || (!st.Present && w.empty()) {
		return err
	}
	if len(st.Broken) > 0 && !w.empty() {
		if err := a.opts.NAT.Ensure(); err != nil {
			return err
		}
	}
	var errs []error
	for ip, targets := range w.ingress {
		if !slices.Equal(st.Ingress[ip], targets) || slices.Contains(st.Stray, ip) {
			errs = append(errs, a.opts.NAT.SetIngress(ip, targets))
		}
	}
	errs = append(errs, a.dropStrayIngress(st, w, recs), a.reconcileEgress(st, w), a.reconcileHairpins(st, w))
	return errors.Join(errs...)
}

// dropStrayIngress removes the ingress rules of our IPs that no record
// steers, then forgets the flows they DNATed (once the table no longer
// steers to them, as steer does).
func (a *Assigner) dropStrayIngress(st *nat.State, w natWant, recs map[string]*record) error {
	held := map[netip.Addr]bool{}
	for _, r := range recs {
		for _, ip := range r.IPs {
			held[ip] = true
		}
	}
	var errs []error
	for _, ip := range union(keys(st.Ingress), st.Stray) {
		if _, ok := w.ingress[ip]; ok || !a.ownsIP(ip) {
			continue
		}
		a.log.Info("stray ingress rule removed", "ip", ip)
		targets := st.Ingress[ip] // read first: a State need not be a copy
		if err := a.opts.NAT.SetIngress(ip, nil); err != nil {
			errs = append(errs, err) // still steered: the next GC forgets
			continue
		}
		a.queueForget(strayFlows(ip, targets, held[ip]))
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

func (a *Assigner) reconcileEgress(st *nat.State, w natWant) error {
	var errs []error
	for k, ip := range w.egress {
		if st.Egress[k] != ip {
			errs = append(errs, a.opts.NAT.SetEgress(k, ip))
		}
	}
	for k, ip := range st.Egress {
		if _, ok := w.egress[k]; !ok && a.ownsIP(ip) {
			a.log.Info("stray egress rule removed", "source", k.Source, "uplink", k.Uplink, "ip", ip)
			errs = append(errs, a.opts.NAT.DelEgress(k))
		}
	}
	return errors.Join(errs...)
}

// reconcileHairpins makes the hairpin sets hold hairpinPlan's subnets, in
// one change: a subnet replaced by a narrower one never leaves a gap.
func (a *Assigner) reconcileHairpins(st *nat.State, w natWant) error {
	ch := a.hairpinPlan(st, w)
	for _, p := range ch.DelHairpin {
		a.log.Info("hairpin subnet no record needs removed", "subnet", p)
	}
	if len(ch.Hairpin)+len(ch.DelHairpin) == 0 {
		return nil
	}
	return a.opts.NAT.Apply(ch)
}

// hairpinPlan is the change that makes the hairpin sets hold exactly the
// subnets that serve the records' (nested ones merged into the widest)
// and those into which the table steers another holder device's flows.
// A subnet that no record needs goes; one that a wider subnet covers
// serves nothing more. GC applies it, status reports it.
func (a *Assigner) hairpinPlan(st *nat.State, w natWant) nat.Change {
	var steered []netip.Addr
	for ip, targets := range st.Ingress {
		if _, mine := w.ingress[ip]; !mine && !a.ownsIP(ip) { // another device's
			steered = append(steered, targets...)
		}
	}
	keep := slices.Collect(maps.Keys(w.hairpin))
	for _, p := range st.Hairpin {
		if slices.ContainsFunc(steered, p.Contains) {
			keep = append(keep, p)
		}
	}
	want := nat.Maximal(keep)
	var ch nat.Change
	for _, p := range want {
		if !slices.Contains(st.Hairpin, p) {
			ch.Hairpin = append(ch.Hairpin, p)
		}
	}
	for _, p := range st.Hairpin {
		if !slices.Contains(want, p) {
			ch.DelHairpin = append(ch.DelHairpin, p)
		}
	}
	return ch
}

// hairpinServed tells whether the table's hairpin sets serve subnet p:
// they hold it or a subnet around it.
func hairpinServed(st *nat.State, p netip.Prefix) bool {
	return slices.ContainsFunc(st.Hairpin, func(q netip.Prefix) bool { return nat.Covers(q, p) })
}

// ownsIP tells whether a rule for ip may be ours: ip is on our holder or
// on no interface at all, not on another holder device of another state.
func (a *Assigner) ownsIP(ip netip.Addr) bool {
	r, err := a.k.lookup(ip)
	if err != nil {
		return false
	}
	dev, _ := a.findHolder()
	on := r.on(ip)
	return on == 0 || on == dev
}

// checkNAT fails CHECK when a rule of rec is missing or points elsewhere.
func (a *Assigner) checkNAT(rec *record) error {
	s := rec.Steering
	if s == nil || a.opts.NAT == nil {
		return nil
	}
	st, err := a.opts.NAT.Read()
	if err != nil {
		return err
	}
	if !st.Present || len(st.Broken) > 0 {
		return Errorf(ErrDrift, "nftables table inet %s: %s", nat.TableName, brokenText(st))
	}
	if err := a.checkIngress(rec, st); err != nil {
		return err
	}
	if err := a.checkEgress(rec, st); err != nil {
		return err
	}
	for _, h := range s.Hairpin {
		if !hairpinServed(st, h.Source) {
			return Errorf(ErrDrift, "%s: no hairpin rule for its subnet %s in table inet %s", h.Target, h.Source.Masked(), nat.TableName)
		}
	}
	return nil
}

// checkEgress fails when an egress rule of rec is not in the table, or
// names an uplink its IP no longer leaves by (re-homed since): the flows
// take the new uplink, which the rule does not match.
func (a *Assigner) checkEgress(rec *record, st *nat.State) error {
	for _, r := range rec.Steering.Egress {
		e, err := a.st.ReadIP(r.IP)
		if err != nil {
			return err
		}
		// An index with no uplink (lost, not yet recovered) tells nothing.
		if e.Uplink != "" && e.Uplink != r.Uplink {
			return Errorf(ErrDrift, "%s: egress rule from %s names uplink %s, but %s now leaves via %s", r.Source, r.IP, r.Uplink, r.IP, e.Uplink)
		}
		if got := st.Egress[nat.EgressKey{Source: r.Source, Uplink: r.Uplink}]; got != r.IP {
			return Errorf(ErrDrift, "%s: egress via %s is not from %s in table inet %s (it is %v)", r.Source, r.Uplink, r.IP, nat.TableName, got)
		}
	}
	return nil
}

// checkIngress fails when an IP of rec does not steer to rec's target, or
// also steers to a target that none of the IP's holders has: a share of
// the new flows would go elsewhere.
func (a *Assigner) checkIngress(rec *record, st *nat.State) error {
	for _, ip := range rec.IPs {
		t, ok := targetOf(rec.Steering, ip)
		if !ok {
			continue
		}
		got := st.Ingress[ip]
		if !slices.Contains(got, t) {
			return Errorf(ErrDrift, "%s: no ingress rule to %s in table inet %s (it steers to %v)", ip, t, nat.TableName, got)
		}
		hs, err := a.holdings([]netip.Addr{ip}, nil)
		if err != nil {
			return err
		}
		want := ingressTargets(ip, hs[ip])
		for _, g := range got {
			if !slices.Contains(want, g) {
				return Errorf(ErrDrift, "%s: ingress rule also steers to %s, which no holder has, in table inet %s", ip, g, nat.TableName)
			}
		}
	}
	return nil
}

func brokenText(st *nat.State) string {
	if !st.Present {
		return "is missing"
	}
	return fmt.Sprint(st.Broken)
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
