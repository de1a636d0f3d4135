package uplinkroute

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
)

// View is the routing of ours as the kernel has it.
type View struct {
	marked *nat.UplinkState
	routes *State
	// foreign are the set members that belong to another holder device's
	// state (another dataDir on the node): never removed from here.
	foreign map[nat.UplinkMember]bool
}

// Read reads the routing of ours: the marks of table inet external-ip,
// and our rules and tables.
func (rt *Router) Read() (*View, error) {
	m, err := rt.routing.ReadMarked()
	if err != nil {
		return nil, steer.KernelErr(err)
	}
	r, err := rt.routing.ReadRoutes()
	if err != nil {
		return nil, steer.KernelErr(err)
	}
	return &View{marked: m, routes: r, foreign: map[nat.UplinkMember]bool{}}, nil
}

// FindForeign marks the members that are another state's: an external IP
// that owns says is not ours (on another holder device), or a container
// address whose egress rule is from such an IP (as steer.Compare tells
// egress rules apart). egress reads the table's egress rules, once, and
// only if a member is a container address.
func (v *View) FindForeign(owns func(netip.Addr) bool, egress func() (map[nat.EgressKey]netip.Addr, error)) error {
	var rules map[nat.EgressKey]netip.Addr
	for _, ms := range v.marked.Members {
		for _, m := range ms {
			if !m.Egress {
				v.foreign[m] = !owns(m.Addr)
				continue
			}
			if rules == nil {
				var err error
				if rules, err = egress(); err != nil {
					return err
				}
			}
			for k, ip := range rules {
				if k.Source == m.Addr && !owns(ip) {
					v.foreign[m] = true
				}
			}
		}
	}
	return nil
}

// Missing names what ns need that the kernel lacks: the one comparison
// that CHECK fails on, status reports and GC mends.
func (rt *Router) Missing(ns []Need, v *View) []string {
	var out []string
	add := func(format string, args ...any) {
		if s := fmt.Sprintf(format, args...); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	cfg := rt.routing.Config()
	for _, b := range v.marked.Broken {
		add("table inet %s: %s", nat.TableName, b)
	}
	for _, n := range ns {
		u, ok := v.marked.Uplinks[n.Uplink]
		f := fam(n.IP.Is6())
		if !ok || !u.Routed[f] {
			add("uplink %s: not marked for routing (%s), so %s's flows leave by the default route", n.Uplink, familyName(f), n.Addr)
			continue
		}
		if !slices.Contains(v.marked.Members[u.Slot], nat.UplinkMember{Slot: u.Slot, Uplink: n.Uplink, Addr: n.Addr, Egress: n.Egress}) {
			add("%s: not marked for uplink %s (slot %d) in table inet %s", n.Addr, n.Uplink, u.Slot, nat.TableName)
		}
		gw := rt.gateways(n.Uplink)[f]
		sl := v.routes.Slots[u.Slot]
		switch {
		case sl == nil || !sl.Rule[f]:
			add("uplink %s: no rule pref %d for mark %#x to table %d (%s)", n.Uplink, cfg.Priority+1, cfg.Mark(u.Slot), cfg.TableOf(u.Slot), familyName(f))
		case !v.routes.Suppress[f]:
			add("no rule pref %d (%s) that keeps the main table's routes first for marked flows", cfg.Priority, familyName(f))
		case sl.Gateway[f] != gw:
			add("uplink %s: table %d routes by %v, want %s (%s)", n.Uplink, cfg.TableOf(u.Slot), sl.Gateway[f], gw, familyName(f))
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

// Extra names what of ours the kernel has that want does not need:
// uplink chains and members no record routes, routes of ours of a family
// for which no chain of their slot is there.
func Extra(want []Need, v *View) []string {
	var out []string
	for name, u := range v.marked.Uplinks {
		for f := range 2 {
			if u.Routed[f] && !wantsFamily(want, name, f) && !v.anyForeign(u.Slot, f) {
				out = append(out, fmt.Sprintf("uplink %s: marked (slot %d, %s) but routes no held IP", name, u.Slot, familyName(f)))
			}
		}
		for _, m := range v.marked.Members[u.Slot] {
			if !v.foreign[m] && !slices.Contains(want, Need{Uplink: name, Addr: m.Addr, Egress: m.Egress, IP: wantIP(want, m)}) {
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
func wantsFamily(want []Need, uplink string, f int) bool {
	return slices.ContainsFunc(want, func(n Need) bool { return n.Uplink == uplink && fam(n.IP.Is6()) == f })
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
func wantIP(want []Need, m nat.UplinkMember) netip.Addr {
	for _, n := range want {
		if n.Addr == m.Addr && n.Egress == m.Egress {
			return n.IP
		}
	}
	return netip.Addr{}
}

// Agrees says whether the kernel's routing of ours (v) is what the
// records need (want), made with this call's config: then Reconcile has
// nothing to do. A node routed with another config (an edited entry), or
// whose record cannot be read, does not agree, whatever the records need:
// the caller mends under the node lock, whose Lock moves the node (Adopt)
// or says why it cannot.
func (rt *Router) Agrees(want []Need, v *View) bool {
	if stale, err := rt.Stale(); stale || err != nil {
		return false
	}
	return len(rt.Missing(want, v))+len(Extra(want, v)) == 0
}

// Reconcile makes the kernel's routing of ours (v) match what the
// records need (want) both ways: what they need is made, what they do not
// is taken away. It changes nothing when the two agree.
func (rt *Router) Reconcile(want []Need, v *View) error {
	missing, extra := rt.Missing(want, v), Extra(want, v)
	if len(missing)+len(extra) == 0 {
		return nil
	}
	rt.log.Info("repairing uplink routing", "missing", missing, "extra", extra)
	return rt.fix(want, v)
}

func (rt *Router) fix(want []Need, v *View) error {
	marked := maps.Clone(v.marked.Uplinks)
	// Members first: a chain goes only once nothing goes to it.
	errs := []error{steer.KernelErr(rt.routing.SetMembers(nil, extraMembers(want, v, marked)))}
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
	errs = append(errs, rt.unmark(v.marked.Uplinks, gone), rt.dropStrayRoutes(v, marked))
	chains, err := rt.wantChains(want, marked)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, up := range distinct(want, func(n Need) string { return n.Uplink }) {
		errs = append(errs, steer.KernelErr(rt.routing.EnsureRoutes(marked[up].Slot, up, rt.ups.Index(up), rt.gateways(up), true)))
	}
	errs = append(errs, steer.KernelErr(rt.routing.Mark(chains)))
	// An uplink kept for another state's members keeps the routes it has.
	errs = append(errs, steer.KernelErr(rt.routing.SetMembers(members(want, marked), nil)))
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
func (rt *Router) wantChains(want []Need, marked map[string]nat.UplinkSlot) ([]nat.UplinkChain, error) {
	var out []nat.UplinkChain
	for _, n := range want {
		c, err := rt.routeFamily(n, marked)
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
func (v *View) anyForeign(s, f int) bool {
	return slices.ContainsFunc(v.marked.Members[s], func(m nat.UplinkMember) bool { return v.foreign[m] && fam(m.Addr.Is6()) == f })
}

// extraMembers lists the members of the uplinks kept that no need has and
// no other state claims.
func extraMembers(want []Need, v *View, marked map[string]nat.UplinkSlot) []nat.UplinkMember {
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
func (rt *Router) dropStrayRoutes(v *View, marked map[string]nat.UplinkSlot) error {
	stray, err := rt.removeStray(v.routes.Slots, marked, func(*Slot) bool { return true })
	last := lastFamilies(marked)
	if !stray && (last[0] && v.routes.Suppress[0] || last[1] && v.routes.Suppress[1]) {
		err = errors.Join(err, steer.KernelErr(rt.routing.RemoveRoutes(0, [2]bool{}, last)))
	}
	return err
}

// removeStray removes, from each slot of slots that pick takes, the rules
// and routes of ours of the families with no chain of that slot, and the
// suppress rule of a family no chain routes; it says whether it found any.
func (rt *Router) removeStray(slots map[int]*Slot, marked map[string]nat.UplinkSlot, pick func(*Slot) bool) (bool, error) {
	last := lastFamilies(marked)
	var errs []error
	found := false
	for s, sl := range slots {
		if fams := strayFamilies(s, sl, marked); fams != ([2]bool{}) && pick(sl) {
			rt.log.Info("stray uplink routes removed", "slot", s, "uplink", sl.Uplink, "families", fams)
			errs = append(errs, steer.KernelErr(rt.routing.RemoveRoutes(s, fams, last)))
			found = true
		}
	}
	return found, errors.Join(errs...)
}

// strayFamilies are the families of which slot s has rules or routes of
// ours but no chain.
func strayFamilies(s int, sl *Slot, marked map[string]nat.UplinkSlot) [2]bool {
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

// Check fails CHECK when the flows of an attachment whose routed needs
// are ns would not leave by their uplink.
func (rt *Router) Check(ns []Need, v *View) error {
	if m := rt.Missing(ns, v); len(m) > 0 {
		return errkind.Errorf(errkind.Drift, "%s", m[0])
	}
	return nil
}

// Report names, for status, every way the routing of ours (v) and what
// the records need (want) disagree, and lists the routed uplinks.
func (rt *Router) Report(want []Need, v *View) (drift []string, uplinks []UplinkReport) {
	drift = append(rt.Missing(want, v), Extra(want, v)...)
	cfg := rt.routing.Config()
	for _, name := range slices.Sorted(maps.Keys(v.marked.Uplinks)) {
		u := v.marked.Uplinks[name]
		ur := UplinkReport{Uplink: name, Mark: fmt.Sprintf("%#x/%#x", u.Mark, cfg.Mask), Table: cfg.TableOf(u.Slot)}
		if sl := v.routes.Slots[u.Slot]; sl != nil {
			ur.Gateway4, ur.Gateway6 = sl.Gateway[0], sl.Gateway[1]
		}
		uplinks = append(uplinks, ur)
	}
	return drift, uplinks
}

// UplinkReport is one uplink routed by us: its mark, table and gateways.
type UplinkReport struct {
	Uplink   string     `json:"uplink"`
	Mark     string     `json:"mark"`
	Table    int        `json:"table"`
	Gateway4 netip.Addr `json:"gateway4,omitzero"`
	Gateway6 netip.Addr `json:"gateway6,omitzero"`
}
