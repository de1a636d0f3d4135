package assigner

import (
	"errors"
	"maps"
	"net/netip"
	"slices"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
)

// Routing is what the assigner asks of the host to send an external IP's
// flows out of its own uplink when that is not the default route's
// (packages uplinkroute and nat); tests give a fake. Which uplink gets a
// slot, and which addresses are marked for it, is decided here, from the
// records: nothing of it is stored but in the kernel.
type Routing interface {
	Config() uplinkroute.Config
	// Off routes nothing new (config uplinkRouting.mode off); what was
	// routed is still taken away.
	Off() bool
	// DefaultUplink is the index of the main table's default route's
	// interface for the family, 0 for none.
	DefaultUplink(v6 bool) (int, error)
	// Gateway is the uplink's gateway toward ip: configured, else learned
	// from the main table; invalid when there is none.
	Gateway(uplink string, index int, ip netip.Addr) (netip.Addr, error)
	ReadRoutes() (*uplinkroute.State, error)
	// Collides says why slot s is another program's, "" when it is free.
	Collides(s int) (string, error)
	// EnsureRoutes is given the uplink's index when known (0: not).
	EnsureRoutes(s int, uplink string, index int, gw [2]netip.Addr, replace bool) error
	RemoveRoutes(s int, others []int) error
	Marked() (map[string]nat.UplinkSlot, error)
	SetMarked(all, gone map[string]nat.UplinkSlot) error
	SetMembers(add, del []nat.UplinkMember) error
	// SlotEmpty tells whether slot s's sets are all empty.
	SlotEmpty(s int) (bool, error)
	ReadMarked() (*nat.UplinkState, error)
}

// uplinkNeed is one address a steering needs marked for an uplink: an
// external IP whose new flows arriving there are answered through it, or
// a container address (egress) whose new flows leave through it.
type uplinkNeed struct {
	uplink string
	addr   netip.Addr
	egress bool
	ip     netip.Addr // the external IP, whose family and network pick the gateway
}

// needs lists s's: each external IP of ips with an ingress target, on its
// uplink; each container address by the uplink of its first egress rule
// of the family (the first external IP of the family in request order, as
// for its SNAT): a container's flows leave by one route.
func needs(s *steering, ips []netip.Addr, uplinkOf map[netip.Addr]string) []uplinkNeed {
	if s == nil {
		return nil
	}
	var out []uplinkNeed
	for _, ip := range ips {
		if _, ok := targetOf(s, ip); ok && uplinkOf[ip] != "" {
			out = append(out, uplinkNeed{uplink: uplinkOf[ip], addr: ip, ip: ip})
		}
	}
	seen := map[netip.Addr]bool{}
	for _, r := range s.Egress {
		if !seen[r.Source] {
			seen[r.Source] = true
			out = append(out, uplinkNeed{uplink: r.Uplink, addr: r.Source, egress: true, ip: r.IP})
		}
	}
	return out
}

// routeCache keeps, for one invocation, each uplink's verdict: whether
// its flows need routing of ours, and its gateway of each family.
type routeCache struct {
	def  map[bool]int
	gw   map[string]*[2]netip.Addr
	done map[string]*[2]bool
}

// routedNeed tells whether the main table has a default route of n's
// family, not through n's uplink, and the uplink has a gateway: only then
// do its flows need our routing. The gateway found is kept for the
// uplink's table.
func (a *Assigner) routedNeed(n uplinkNeed) (bool, error) {
	c := &a.routing
	if c.def == nil {
		c.def, c.gw, c.done = map[bool]int{}, map[string]*[2]netip.Addr{}, map[string]*[2]bool{}
	}
	v6 := n.ip.Is6()
	f := fam(v6)
	if c.done[n.uplink] != nil && c.done[n.uplink][f] {
		return c.gw[n.uplink][f].IsValid(), nil
	}
	up, err := a.ups.byName(n.uplink)
	if err != nil || a.opts.Routing.Off() {
		return false, nil // gone or down: nothing leaves by it; GC re-homes
	}
	def, ok := c.def[v6]
	if !ok {
		if def, err = a.opts.Routing.DefaultUplink(v6); err != nil {
			return false, Errorf(ErrHost, "%w", err)
		}
		c.def[v6] = def
	}
	var gw netip.Addr
	// With no default route of the family, the main table's own routes
	// are all a reply could take anyway: there is nothing to correct.
	if def != 0 && def != up.Index {
		if gw, err = a.opts.Routing.Gateway(n.uplink, up.Index, n.ip); err != nil {
			return false, Errorf(ErrHost, "%w", err)
		}
		if !gw.IsValid() {
			a.log.Warn("uplink has no gateway: flows to its external IPs are answered by the main table's routes", "uplink", n.uplink, "ip", n.ip)
		}
	}
	if c.gw[n.uplink] == nil {
		c.gw[n.uplink], c.done[n.uplink] = &[2]netip.Addr{}, &[2]bool{}
	}
	c.gw[n.uplink][f], c.done[n.uplink][f] = gw, true
	return gw.IsValid(), nil
}

func fam(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

// routedNeeds keeps the needs whose uplink needs our routing.
func (a *Assigner) routedNeeds(ns []uplinkNeed) ([]uplinkNeed, error) {
	var out []uplinkNeed
	for _, n := range ns {
		ok, err := a.routedNeed(n)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, n)
		}
	}
	return out, nil
}

// gateways is the uplink's gateway of each family, as routedNeed found.
func (a *Assigner) gateways(uplink string) [2]netip.Addr {
	if g := a.routing.gw[uplink]; g != nil {
		return *g
	}
	return [2]netip.Addr{}
}

// routeChange marks and routes, before the NAT step's transaction, what
// the attachment's steering needs now, and says which addresses that
// transaction puts into the uplinks' sets and takes out of them: what the
// steering needs now, and what it needed before and no longer does (an
// external IP only once no holder steers it in: want lists each touched
// IP's targets after the change). The members go in the NAT step's own
// transaction, one commit less per change (figure: docs/performance.md,
// "Tried on 4 Dec 2026, night"); an uplink whose sets end empty loses its
// slot, rules and table afterwards (dropEmptySlots). Each step is
// idempotent, so a replay of the change finishes it; the steps named
// uplink-marked, uplink-routed, uplink-members and uplink-unrouted are
// where the crash tests kill it (a new slot marked but not routed, routed
// but with no member, members and NAT changed, routes gone but the mark
// kept).
func (a *Assigner) routeChange(j *journal, was []*steering, want [][]netip.Addr, w *written) (routePlan, error) {
	if a.opts.Routing == nil {
		return routePlan{}, nil
	}
	var now []uplinkNeed
	if j.Record != nil {
		now = needs(j.Record.Steering, j.Record.IPs, w.uplinks)
	}
	add, err := a.routedNeeds(now)
	if err != nil {
		return routePlan{}, err
	}
	del := leavingNeeds(j.Touch, was, want, now, w.uplinks)
	if len(add)+len(del) == 0 {
		return routePlan{}, nil
	}
	marked, err := a.opts.Routing.Marked()
	if err != nil || (len(marked) == 0 && len(add) == 0) {
		return routePlan{}, kernelErr(err)
	}
	if err := a.slotsFor(add, marked); err != nil {
		return routePlan{}, err
	}
	a.step("uplink-routed")
	return routePlan{marked: marked, add: members(add, marked), del: a.delMembers(del, add, marked)}, nil
}

// routePlan is what routeChange leaves to the NAT step's transaction and
// to dropEmptySlots: the marked uplinks, and the members to add and remove.
type routePlan struct {
	marked   map[string]nat.UplinkSlot
	add, del []nat.UplinkMember
}

// leavingNeeds is what the change's earlier steerings needed that now's
// does not: egress sources no longer leaving by the same uplink, and
// external IPs that no holder steers in any more.
func leavingNeeds(touch []netip.Addr, was []*steering, want [][]netip.Addr, now []uplinkNeed, uplinkOf map[netip.Addr]string) []uplinkNeed {
	var out []uplinkNeed
	for _, old := range was {
		for _, n := range needs(old, touch, uplinkOf) {
			if n.egress && !slices.Contains(now, n) {
				out = append(out, n)
			}
		}
	}
	for i, ip := range touch {
		if len(want[i]) == 0 {
			out = append(out, uplinkNeed{uplink: uplinkOf[ip], addr: ip, ip: ip})
		}
	}
	return out
}

// slotsFor gives each uplink of add without a slot the lowest slot that
// is neither marked nor another program's, and makes its marks and
// routes; an uplink that has one gets its routes made sure of (a family
// may be new to it). It refuses when every slot is taken.
func (a *Assigner) slotsFor(add []uplinkNeed, marked map[string]nat.UplinkSlot) error {
	cfg := a.opts.Routing.Config()
	var fresh []string
	for _, n := range add {
		if _, ok := marked[n.uplink]; ok || slices.Contains(fresh, n.uplink) {
			continue
		}
		s, err := a.freeSlot(cfg, marked)
		if err != nil {
			return err
		}
		marked[n.uplink] = nat.UplinkSlot{Slot: s, Mark: cfg.Mark(s)}
		fresh = append(fresh, n.uplink)
	}
	if len(fresh) > 0 {
		if err := a.opts.Routing.SetMarked(marked, nil); err != nil {
			return kernelErr(err)
		}
		a.log.Info("uplinks marked", "uplinks", fresh)
		a.step("uplink-marked")
	}
	var errs []error
	for _, up := range uniqueUplinks(add) {
		// A fresh slot's table holds nothing of another program's
		// (freeSlot): its routes and rules are made without first asking
		// for them, one rule dump per family less.
		errs = append(errs, a.opts.Routing.EnsureRoutes(marked[up].Slot, up, a.uplinkIndex(up), a.gateways(up), slices.Contains(fresh, up)))
	}
	return kernelErr(errors.Join(errs...))
}

// uplinkIndex is the uplink's interface index as this invocation found
// it (routedNeed did), so that making its routes need not ask again; 0
// when it is not known.
func (a *Assigner) uplinkIndex(name string) int {
	up, err := a.ups.byName(name)
	if err != nil {
		return 0
	}
	return up.Index
}

func (a *Assigner) freeSlot(cfg uplinkroute.Config, marked map[string]nat.UplinkSlot) (int, error) {
	used := map[int]bool{}
	for _, u := range marked {
		used[u.Slot] = true
	}
	var why []string
	for s := 1; s <= cfg.Slots(); s++ {
		if used[s] {
			continue
		}
		c, err := a.opts.Routing.Collides(s)
		if err != nil {
			return 0, kernelErr(err)
		}
		if c == "" {
			return s, nil
		}
		why = append(why, c)
	}
	return 0, Errorf(ErrRefused, "uplinkRouting: no free slot of %d for another uplink (%v); set uplinkRouting's mark or table to free ones", cfg.Slots(), why)
}

func uniqueUplinks(ns []uplinkNeed) []string {
	var out []string
	for _, n := range ns {
		if !slices.Contains(out, n.uplink) {
			out = append(out, n.uplink)
		}
	}
	return out
}

func members(ns []uplinkNeed, marked map[string]nat.UplinkSlot) []nat.UplinkMember {
	var out []nat.UplinkMember
	for _, n := range ns {
		if u, ok := marked[n.uplink]; ok {
			out = append(out, nat.UplinkMember{Slot: u.Slot, Addr: n.addr, Egress: n.egress})
		}
	}
	return out
}

// delMembers is each leaving need in its uplink's slot, or in every slot
// when its uplink is not known any more (a replay after the index was
// cleared), but never one that add puts back.
func (a *Assigner) delMembers(del, add []uplinkNeed, marked map[string]nat.UplinkSlot) []nat.UplinkMember {
	keep := members(add, marked)
	var out []nat.UplinkMember
	for _, n := range del {
		for name, u := range marked {
			m := nat.UplinkMember{Slot: u.Slot, Addr: n.addr, Egress: n.egress}
			if (n.uplink == "" || n.uplink == name) && !slices.Contains(keep, m) && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// dropEmptySlots takes the slot, rules and table away from each uplink
// that dels took members from and whose sets are now empty: nothing is
// routed by it any more.
func (a *Assigner) dropEmptySlots(marked map[string]nat.UplinkSlot, dels []nat.UplinkMember) error {
	gone := map[string]nat.UplinkSlot{}
	for name, u := range marked {
		if !slices.ContainsFunc(dels, func(m nat.UplinkMember) bool { return m.Slot == u.Slot }) {
			continue
		}
		empty, err := a.opts.Routing.SlotEmpty(u.Slot)
		if err != nil {
			return kernelErr(err)
		}
		if empty {
			gone[name] = u
		}
	}
	return a.unmark(marked, gone)
}

// unmark removes the routes, then the marks, of the uplinks gone.
func (a *Assigner) unmark(marked, gone map[string]nat.UplinkSlot) error {
	if len(gone) == 0 {
		return nil
	}
	rest := maps.Clone(marked)
	var others []int
	for name := range gone {
		delete(rest, name)
	}
	for _, u := range rest {
		others = append(others, u.Slot)
	}
	var errs []error
	for name, u := range gone {
		a.log.Info("uplink unmarked", "uplink", name, "slot", u.Slot)
		errs = append(errs, a.opts.Routing.RemoveRoutes(u.Slot, others))
	}
	if err := errors.Join(errs...); err != nil {
		return kernelErr(err) // marks kept: the next change or GC retries
	}
	a.step("uplink-unrouted")
	return kernelErr(a.opts.Routing.SetMarked(rest, gone))
}
