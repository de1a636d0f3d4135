package assigner

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// routingView is the routing of ours as the kernel has it.
type routingView struct {
	marked *nat.UplinkState
	routes *uplinkroute.State
	// foreign are the set members that belong to another holder device's
	// state (another dataDir on the node): never removed from here.
	foreign map[nat.UplinkMember]bool
}

func (a *Assigner) readRouting() (*routingView, error) {
	m, err := a.opts.Routing.ReadMarked()
	if err != nil {
		return nil, steer.KernelErr(err)
	}
	r, err := a.opts.Routing.ReadRoutes()
	if err != nil {
		return nil, steer.KernelErr(err)
	}
	v := &routingView{marked: m, routes: r, foreign: map[nat.UplinkMember]bool{}}
	return v, a.findForeign(v)
}

// findForeign marks the members that are another state's: an external IP
// on another holder device, or a container address whose egress rule is
// from such an IP (as compareNAT tells egress rules apart).
func (a *Assigner) findForeign(v *routingView) error {
	var egress map[nat.EgressKey]netip.Addr
	for _, ms := range v.marked.Members {
		for _, m := range ms {
			if !m.Egress {
				v.foreign[m] = !a.ownsIP(m.Addr)
				continue
			}
			if egress == nil && a.opts.NAT != nil {
				st, err := a.opts.NAT.Read()
				if err != nil {
					return err
				}
				egress = st.Egress
			}
			for k, ip := range egress {
				if k.Source == m.Addr && !a.ownsIP(ip) {
					v.foreign[m] = true
				}
			}
		}
	}
	return nil
}

// wantRouting is every routed need of the records, each IP's uplink
// from its index entry.
func (a *Assigner) wantRouting(recs map[string]*record) ([]uplinkNeed, error) {
	var out []uplinkNeed
	for _, key := range slices.Sorted(maps.Keys(recs)) {
		ns, err := a.recordNeeds(recs[key])
		if err != nil {
			return nil, err
		}
		for _, n := range ns {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

func (a *Assigner) recordNeeds(r *record) ([]uplinkNeed, error) {
	if r.Steering == nil {
		return nil, nil
	}
	uplinkOf := map[netip.Addr]string{}
	for _, ip := range r.IPs {
		e, err := a.st.ReadIP(ip)
		if err != nil {
			return nil, err
		}
		uplinkOf[ip] = e.Uplink
	}
	return a.routedNeeds(needs(r.Steering, r.IPs, uplinkOf), nil)
}

// routingMissing names what ns need that the kernel lacks: the one
// comparison that CHECK fails on, status reports and GC mends.
func (a *Assigner) routingMissing(ns []uplinkNeed, v *routingView) []string {
	var out []string
	add := func(format string, args ...any) {
		if s := fmt.Sprintf(format, args...); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	cfg := a.opts.Routing.Config()
	for _, b := range v.marked.Broken {
		add("table inet %s: %s", nat.TableName, b)
	}
	for _, n := range ns {
		u, ok := v.marked.Uplinks[n.uplink]
		f := fam(n.ip.Is6())
		if !ok || !u.Routed[f] {
			add("uplink %s: not marked for routing (%s), so %s's flows leave by the default route", n.uplink, familyName(f), n.addr)
			continue
		}
		if !slices.Contains(v.marked.Members[u.Slot], nat.UplinkMember{Slot: u.Slot, Uplink: n.uplink, Addr: n.addr, Egress: n.egress}) {
			add("%s: not marked for uplink %s (slot %d) in table inet %s", n.addr, n.uplink, u.Slot, nat.TableName)
		}
		gw := a.gateways(n.uplink)[f]
		sl := v.routes.Slots[u.Slot]
		switch {
		case sl == nil || !sl.Rule[f]:
			add("uplink %s: no rule pref %d for mark %#x to table %d (%s)", n.uplink, cfg.Priority+1, cfg.Mark(u.Slot), cfg.TableOf(u.Slot), familyName(f))
		case !v.routes.Suppress[f]:
			add("no rule pref %d (%s) that keeps the main table's routes first for marked flows", cfg.Priority, familyName(f))
		case sl.Gateway[f] != gw:
			add("uplink %s: table %d routes by %v, want %s (%s)", n.uplink, cfg.TableOf(u.Slot), sl.Gateway[f], gw, familyName(f))
		}
	}
	return out
}

func familyName(f int) string {
	if f == 1 {
		return "IPv6"
	}
	return "IPv4"
}

// routingExtra names what of ours the kernel has that want does not
// need: uplink chains and members no record routes, routes of ours of a
// family for which no chain of their slot is there.
func routingExtra(want []uplinkNeed, v *routingView) []string {
	var out []string
	for name, u := range v.marked.Uplinks {
		for f := range 2 {
			if u.Routed[f] && !wantsFamily(want, name, f) && !v.anyForeign(u.Slot, f) {
				out = append(out, fmt.Sprintf("uplink %s: marked (slot %d, %s) but routes no held IP", name, u.Slot, familyName(f)))
			}
		}
		for _, m := range v.marked.Members[u.Slot] {
			if !v.foreign[m] && !slices.Contains(want, uplinkNeed{uplink: name, addr: m.Addr, egress: m.Egress, ip: wantIP(want, m)}) {
				out = append(out, fmt.Sprintf("%s: marked for uplink %s (slot %d) but no record routes it there", m.Addr, name, u.Slot))
			}
		}
	}
	for s, sl := range v.routes.Slots {
		for f, stray := range strayFamilies(s, sl, v.marked.Uplinks) {
			if stray {
				out = append(out, fmt.Sprintf("slot %d: rules or routes of ours (%s) for no marked uplink", s, familyName(f)))
			}
		}
	}
	slices.Sort(out)
	return out
}

// wantsFamily tells whether want routes an address of family f by uplink.
func wantsFamily(want []uplinkNeed, uplink string, f int) bool {
	return slices.ContainsFunc(want, func(n uplinkNeed) bool { return n.uplink == uplink && fam(n.ip.Is6()) == f })
}

// slotRoutes tells whether an uplink of slot s has its chain of family f.
func slotRoutes(marked map[string]nat.UplinkSlot, s, f int) bool {
	for _, u := range marked {
		if u.Slot == s && u.Routed[f] {
			return true
		}
	}
	return false
}

// wantIP is the external IP that want pairs with m's address, for an
// exact comparison of needs.
func wantIP(want []uplinkNeed, m nat.UplinkMember) netip.Addr {
	for _, n := range want {
		if n.addr == m.Addr && n.egress == m.Egress {
			return n.ip
		}
	}
	return netip.Addr{}
}

// compareRouting is what the records need of the routing and what the
// kernel has, for repair and for status alike.
func (a *Assigner) compareRouting(recs map[string]*record) ([]uplinkNeed, *routingView, error) {
	want, err := a.wantRouting(recs)
	if err != nil {
		return nil, nil, err
	}
	v, err := a.readRouting()
	return want, v, err
}

// reconcileRouting makes the kernel's routing of ours match the records
// both ways: what they need is made, what they do not is taken away.
func (a *Assigner) reconcileRouting(recs map[string]*record) error {
	if a.opts.Routing == nil {
		return nil
	}
	want, v, err := a.compareRouting(recs)
	if err != nil {
		return err
	}
	missing, extra := a.routingMissing(want, v), routingExtra(want, v)
	if len(missing)+len(extra) == 0 {
		return nil
	}
	a.log.Info("repairing uplink routing", "missing", missing, "extra", extra)
	return a.fixRouting(want, v)
}

func (a *Assigner) fixRouting(want []uplinkNeed, v *routingView) error {
	marked := maps.Clone(v.marked.Uplinks)
	// Members first: a chain goes only once nothing goes to it.
	errs := []error{steer.KernelErr(a.opts.Routing.SetMembers(nil, extraMembers(want, v, marked)))}
	var gone []nat.UplinkChain
	for name, u := range v.marked.Uplinks {
		for _, c := range chainsOf(name, u) {
			if f := fam(c.V6); !wantsFamily(want, name, f) && !v.anyForeign(u.Slot, f) {
				gone = append(gone, c)
				u.Routed[f] = false
			}
		}
		if marked[name] = u; u.Routed == ([2]bool{}) {
			delete(marked, name)
		}
	}
	errs = append(errs, a.unmark(v.marked.Uplinks, gone), a.dropStrayRoutes(v, marked))
	chains, err := a.wantChains(want, marked)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, up := range distinct(want, func(n uplinkNeed) string { return n.uplink }) {
		errs = append(errs, steer.KernelErr(a.opts.Routing.EnsureRoutes(marked[up].Slot, up, a.uplinkIndex(up), a.gateways(up), true)))
	}
	errs = append(errs, steer.KernelErr(a.opts.Routing.Mark(chains)))
	// An uplink kept for another state's members keeps the routes it has.
	errs = append(errs, steer.KernelErr(a.opts.Routing.SetMembers(members(want, marked), nil)))
	return errors.Join(errs...)
}

// chainsOf lists the chains an uplink has.
func chainsOf(name string, u nat.UplinkSlot) []nat.UplinkChain {
	var out []nat.UplinkChain
	for f := range 2 {
		if u.Routed[f] {
			out = append(out, chainOf(name, u, f))
		}
	}
	return out
}

// wantChains gives each uplink of want without a slot a free one, and
// lists the chain of every (uplink, family) of want, which GC makes anew.
func (a *Assigner) wantChains(want []uplinkNeed, marked map[string]nat.UplinkSlot) ([]nat.UplinkChain, error) {
	var out []nat.UplinkChain
	for _, n := range want {
		c, err := a.routeFamily(n, marked)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// anyForeign tells whether slot s has a member of family f of another
// state.
func (v *routingView) anyForeign(s, f int) bool {
	return slices.ContainsFunc(v.marked.Members[s], func(m nat.UplinkMember) bool { return v.foreign[m] && fam(m.Addr.Is6()) == f })
}

// extraMembers lists the members of the uplinks kept that no need has and
// no other state claims.
func extraMembers(want []uplinkNeed, v *routingView, marked map[string]nat.UplinkSlot) []nat.UplinkMember {
	keep := members(want, marked)
	var out []nat.UplinkMember
	for _, ms := range v.marked.Members {
		for _, m := range ms {
			if !slices.Contains(keep, m) && !v.foreign[m] {
				out = append(out, m)
			}
		}
	}
	return out
}

// dropStrayRoutes removes the rules and routes of ours of a family for
// which no chain of their slot is there (a crash between the two, a chain
// removed by hand), and the suppress rule of a family no chain routes.
func (a *Assigner) dropStrayRoutes(v *routingView, marked map[string]nat.UplinkSlot) error {
	stray, err := a.removeStray(v.routes.Slots, marked, func(*uplinkroute.Slot) bool { return true })
	last := lastFamilies(marked)
	if !stray && (last[0] && v.routes.Suppress[0] || last[1] && v.routes.Suppress[1]) {
		err = errors.Join(err, steer.KernelErr(a.opts.Routing.RemoveRoutes(0, [2]bool{}, last)))
	}
	return err
}

// removeStray removes, from each slot of slots that pick takes, the rules
// and routes of ours of the families with no chain of that slot, and the
// suppress rule of a family no chain routes; it says whether it found any.
func (a *Assigner) removeStray(slots map[int]*uplinkroute.Slot, marked map[string]nat.UplinkSlot, pick func(*uplinkroute.Slot) bool) (bool, error) {
	last := lastFamilies(marked)
	var errs []error
	found := false
	for s, sl := range slots {
		if fams := strayFamilies(s, sl, marked); fams != ([2]bool{}) && pick(sl) {
			a.log.Info("stray uplink routes removed", "slot", s, "uplink", sl.Uplink, "families", fams)
			errs = append(errs, steer.KernelErr(a.opts.Routing.RemoveRoutes(s, fams, last)))
			found = true
		}
	}
	return found, errors.Join(errs...)
}

// strayFamilies are the families of which slot s has rules or routes of
// ours but no chain.
func strayFamilies(s int, sl *uplinkroute.Slot, marked map[string]nat.UplinkSlot) [2]bool {
	var fams [2]bool
	for f := range 2 {
		fams[f] = (sl.Rule[f] || sl.Gateway[f].IsValid()) && !slotRoutes(marked, s, f)
	}
	return fams
}

// lastFamilies says of each family whether no chain routes it.
func lastFamilies(marked map[string]nat.UplinkSlot) [2]bool {
	return [2]bool{!otherRoutes(marked, nil, 0), !otherRoutes(marked, nil, 1)}
}

// checkRouting fails CHECK when rec's flows would not leave by their
// uplink as its routing needs.
func (a *Assigner) checkRouting(rec *record) error {
	if a.opts.Routing == nil || rec.Steering == nil {
		return nil
	}
	ns, err := a.recordNeeds(rec)
	if err != nil || len(ns) == 0 {
		return err
	}
	v, err := a.readRouting()
	if err != nil {
		return err
	}
	if m := a.routingMissing(ns, v); len(m) > 0 {
		return Errorf(ErrDrift, "%s", m[0])
	}
	return nil
}

// reportRouting names, for status, every way the routing of ours and
// the records disagree, and lists the routed uplinks.
func (a *Assigner) reportRouting(rep *Report, recs map[string]*record) error {
	if a.opts.Routing == nil {
		return nil
	}
	want, v, err := a.compareRouting(recs)
	if err != nil {
		return err
	}
	rep.Drift = append(rep.Drift, a.routingMissing(want, v)...)
	rep.Drift = append(rep.Drift, routingExtra(want, v)...)
	cfg := a.opts.Routing.Config()
	for _, name := range slices.Sorted(maps.Keys(v.marked.Uplinks)) {
		u := v.marked.Uplinks[name]
		ur := UplinkReport{Uplink: name, Mark: fmt.Sprintf("%#x/%#x", u.Mark, cfg.Mask), Table: cfg.TableOf(u.Slot)}
		if sl := v.routes.Slots[u.Slot]; sl != nil {
			ur.Gateway4, ur.Gateway6 = sl.Gateway[0], sl.Gateway[1]
		}
		rep.Uplinks = append(rep.Uplinks, ur)
	}
	return nil
}

// UplinkReport is one uplink routed by us: its mark, table and gateways.
type UplinkReport struct {
	Uplink   string     `json:"uplink"`
	Mark     string     `json:"mark"`
	Table    int        `json:"table"`
	Gateway4 netip.Addr `json:"gateway4,omitzero"`
	Gateway6 netip.Addr `json:"gateway6,omitzero"`
}
