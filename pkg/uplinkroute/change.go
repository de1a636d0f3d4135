package uplinkroute

import (
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/external-ip/external-ip/pkg/errkind"
	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/store"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// Routing is what the uplink routing asks of the node to send an
// external IP's flows out of its own uplink when that is not the default
// route's: the rules and tables of this package, the marks of package
// nat; HostRouting is the host's, tests give a fake. Which uplink gets a
// slot, and which addresses are marked for it, is decided here, from the
// records: nothing of it is stored but in the kernel.
type Routing interface {
	Config() slots.Config
	// Off routes nothing new (config uplinkRouting.mode off); what was
	// routed is still taken away.
	Off() bool
	// DefaultUplink is the index of the main table's default route's
	// interface for the family, 0 for none.
	DefaultUplink(v6 bool) (int, error)
	// Gateway is the uplink's gateway toward ip: configured, else learned
	// from the main table; invalid when there is none.
	Gateway(uplink string, index int, ip netip.Addr) (netip.Addr, error)
	ReadRoutes() (*State, error)
	// Collides says why slot s is another program's, "" when it is free.
	Collides(s int) (string, error)
	// EnsureRoutes is given the uplink's index when known (0: not).
	EnsureRoutes(s int, uplink string, index int, gw [2]netip.Addr, replace bool) error
	// RemoveRoutes takes slot s's rule and route of each family of fams
	// away, and the suppress rule of each family of last.
	RemoveRoutes(s int, fams, last [2]bool) error
	// Marked reads which uplink has which slot, the families it routes
	// and their members' count.
	Marked() (map[string]nat.UplinkSlot, error)
	// Mark makes the chains anew; Unmark removes them (refused while a
	// member goes to one).
	Mark(chains []nat.UplinkChain) error
	Unmark(chains []nat.UplinkChain) error
	SetMembers(add, del []nat.UplinkMember) error
	ReadMarked() (*nat.UplinkState, error)
	// LockNode takes the node lock (store.LockNode), which every change of
	// the marking and the rules and tables takes, whatever its dataDir,
	// waiting at most wait; unlock releases it.
	LockNode(wait time.Duration) (unlock func(), err error)
	// Recorded is the config the node's routing was made with, as
	// recorded, the defaults when none is; Adopt, under the node lock,
	// makes the record the routing's config.
	Recorded() (slots.Config, error)
	Adopt() error
}

// Need is one address a steering needs marked for an uplink: an
// external IP whose new flows arriving there are answered through it, or
// a container address (egress) whose new flows leave through it.
type Need struct {
	Uplink string
	Addr   netip.Addr
	Egress bool
	IP     netip.Addr // the external IP, whose family and network pick the gateway
}

// Needs lists s's: each external IP of ips with an ingress target, on its
// uplink; each container address by the uplink of its first egress rule
// of the family (the first external IP of the family in request order, as
// for its SNAT): a container's flows leave by one route.
func Needs(s *store.Steering, ips []netip.Addr, uplinkOf map[netip.Addr]string) []Need {
	if s == nil {
		return nil
	}
	var out []Need
	for _, ip := range ips {
		if _, ok := steer.Target(s, ip); ok && uplinkOf[ip] != "" {
			out = append(out, Need{Uplink: uplinkOf[ip], Addr: ip, IP: ip})
		}
	}
	seen := map[netip.Addr]bool{}
	for _, r := range s.Egress {
		if !seen[r.Source] {
			seen[r.Source] = true
			out = append(out, Need{Uplink: r.Uplink, Addr: r.Source, Egress: true, IP: r.IP})
		}
	}
	return out
}

// Router decides and makes the uplink routing of one call: it keeps, for
// that call alone, each uplink's verdict (whether its flows need routing
// of ours, and its gateway of each family).
type Router struct {
	routing Routing
	ups     *host.Uplinks
	log     *slog.Logger
	step    func(string)
	def     map[bool]int
	gw      map[string]*[2]netip.Addr
	done    map[string]*[2]bool
	// wait bounds the wait for the node lock; unlock releases it, nil
	// while the call does not hold it.
	wait   time.Duration
	unlock func()
}

// NewRouter begins a call's routing through r, knowing nothing yet. ups
// are the call's uplinks; step is called at the steps uplink-routed,
// uplink-members and uplink-unmarked, where the crash tests kill a change;
// wait bounds the wait for the node lock.
func NewRouter(r Routing, ups *host.Uplinks, log *slog.Logger, step func(string), wait time.Duration) *Router {
	return &Router{routing: r, ups: ups, log: log, step: step, wait: wait}
}

// Lock takes the node lock for the call, once: two dataDirs' changes
// would otherwise read the same free slot, or one would take away the
// suppress rule of a family whose chain the other just made. The call
// keeps it until Release.
func (rt *Router) Lock() error {
	if rt.unlock != nil {
		return nil
	}
	unlock, err := rt.routing.LockNode(rt.wait)
	if err != nil {
		return err
	}
	if err := rt.routing.Adopt(); err != nil {
		unlock()
		return err
	}
	rt.unlock = unlock
	return nil
}

// Stale says whether the node's routing was made with another config
// than this call's: Read sees none of that config's rules and routes,
// which only Lock (Adopt) moves.
func (rt *Router) Stale() (bool, error) {
	c, err := rt.routing.Recorded()
	return err == nil && c != rt.routing.Config(), err
}

// Release lets the node lock go, if the call holds it; a nil Router holds
// nothing.
func (rt *Router) Release() {
	if rt != nil && rt.unlock != nil {
		rt.unlock()
		rt.unlock = nil
	}
}

// routedNeed tells whether the main table has a default route of n's
// family, not through n's uplink, and the uplink has a gateway: only then
// do its flows need our routing. The gateway found is kept for the
// uplink's table.
func (rt *Router) routedNeed(n Need, marked map[string]nat.UplinkSlot) (bool, error) {
	c := rt
	if c.def == nil {
		c.def, c.gw, c.done = map[bool]int{}, map[string]*[2]netip.Addr{}, map[string]*[2]bool{}
	}
	v6 := n.IP.Is6()
	f := fam(v6)
	if c.done[n.Uplink] != nil && c.done[n.Uplink][f] {
		return c.gw[n.Uplink][f].IsValid(), nil
	}
	up, err := rt.ups.ByName(n.Uplink)
	if err != nil || rt.routing.Off() {
		return false, nil // gone or down: nothing leaves by it; GC re-homes
	}
	def, err := rt.defaultUplink(v6)
	if err != nil {
		return false, err
	}
	var gw netip.Addr
	// With no default route of the family, the main table's own routes
	// are all a reply could take anyway: there is nothing to correct.
	if def != 0 && def != up.Index && marked[n.Uplink].Routed[f] {
		// Its chain is made after its routes (chainsFor): an ADD trusts
		// it, and CHECK, GC and repair compare the gateway.
		return true, nil
	}
	if def != 0 && def != up.Index {
		if gw, err = rt.routing.Gateway(n.Uplink, up.Index, n.IP); err != nil {
			return false, steer.KernelErr(err)
		}
		if !gw.IsValid() {
			rt.log.Warn("uplink has no gateway: flows to its external IPs are answered by the main table's routes", "uplink", n.Uplink, "ip", n.IP)
		}
	}
	if c.gw[n.Uplink] == nil {
		c.gw[n.Uplink], c.done[n.Uplink] = &[2]netip.Addr{}, &[2]bool{}
	}
	c.gw[n.Uplink][f], c.done[n.Uplink][f] = gw, true
	return gw.IsValid(), nil
}

// defaultUplink is the main table's default route's interface of the
// family, asked once per call.
func (rt *Router) defaultUplink(v6 bool) (int, error) {
	if rt.def == nil {
		rt.def, rt.gw, rt.done = map[bool]int{}, map[string]*[2]netip.Addr{}, map[string]*[2]bool{}
	}
	def, ok := rt.def[v6]
	if !ok {
		var err error
		if def, err = rt.routing.DefaultUplink(v6); err != nil {
			return 0, steer.KernelErr(err)
		}
		rt.def[v6] = def
	}
	return def, nil
}

// mayRoute says whether a need of ns may be routed by us: its uplink is
// not the default route's, or is gone. It asks the kernel nothing the
// call would not ask anyway.
func (rt *Router) mayRoute(ns []Need) (bool, error) {
	for _, n := range ns {
		up, err := rt.ups.ByName(n.Uplink)
		if err != nil {
			return true, nil
		}
		def, err := rt.defaultUplink(n.IP.Is6())
		if err != nil || def != 0 && def != up.Index {
			return err == nil, err
		}
	}
	return false, nil
}

// Routed keeps the needs whose uplink needs our routing; marked, when
// given, spares the gateway's read of a family the uplink routes.
func (rt *Router) Routed(ns []Need, marked map[string]nat.UplinkSlot) ([]Need, error) {
	var out []Need
	for _, n := range ns {
		ok, err := rt.routedNeed(n, marked)
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
func (rt *Router) gateways(uplink string) [2]netip.Addr {
	if g := rt.gw[uplink]; g != nil {
		return *g
	}
	return [2]netip.Addr{}
}

// Change is one change of attachment as the uplink routing sees it.
type Change struct {
	// Now is what the attachment's steering needs after the change
	// (Needs), Leave what its earlier steerings needed and it no longer
	// does (Leaving).
	Now, Leave []Need
	// AfterFault is set while a failed change is undone, or a change a
	// crash interrupted is settled: only then are routes without a chain
	// looked for (unrouteUnmarked), which reads every table of ours.
	AfterFault bool
}

// Change routes, before the NAT step's transaction, what the attachment's
// steering needs now, and says what that transaction changes of the
// marking (Plan.Into): the chains of the (uplink, family) pairs newly
// routed, the addresses it adds, and those it removes: what the steering
// needed before and no longer does. Which uplink has which slot is read
// from the dump of our table's chains that the same transaction's base
// check then reads again without asking (nat.Table.Uplinks). A chain the
// change may leave with no member goes in that transaction
// (Plan.maybeEmptied), its routes after it (Settle). Each step is
// idempotent, so a replay of the change finishes it; the steps named
// uplink-routed, uplink-members and uplink-unmarked are where the crash
// tests kill it (routes made but no chain; chains and members and NAT
// changed, and a chain emptied gone with its routes left; routes left
// after the chain went).
func (rt *Router) Change(c Change) (Plan, error) {
	if len(c.Now)+len(c.Leave) == 0 {
		return Plan{}, nil
	}
	marked, add, err := rt.read(c)
	if err != nil {
		return Plan{}, err
	}
	if c.AfterFault {
		if err := rt.unrouteUnmarked(c.Leave, marked); err != nil {
			return Plan{}, err
		}
	}
	if len(add)+len(c.Leave) == 0 || (len(marked) == 0 && len(add) == 0) {
		return Plan{}, nil
	}
	fresh, err := rt.chainsFor(add, marked)
	if err != nil {
		return Plan{}, err
	}
	if len(fresh) > 0 {
		rt.log.Info("uplinks routed", "chains", fresh)
		rt.step("uplink-routed")
	}
	return Plan{marked: marked, fresh: fresh, add: members(add, marked), del: rt.delMembers(c.Leave, add, marked)}, nil
}

// read reads which uplink has which slot, and which of c's needs want
// routing, under the node lock (Lock) wherever the change may route, or a
// fault may have left routes: what it read without the lock may be
// another dataDir's change half made, so finding that the change touches
// the marking after all, it takes the lock and reads again. A change on
// the default route's uplink of a node that routes nothing takes no lock.
func (rt *Router) read(c Change) (map[string]nat.UplinkSlot, []Need, error) {
	// Locked before the first read where the change may route: a node
	// that routes reads its marking once. A change that only takes away
	// (a DEL) reads first and locks if it touches the marking: the lookup
	// of the default route that mayRoute makes cost every DEL 0.08 ms of
	// CPU (A/B paired, 95% interval 0.03 to 0.18, exec floor 1.82 ms),
	// where a DEL of a routed uplink's reads twice, the second time from
	// the routing record's dump (nat's Uplinks): no cost seen (-0.03 ms,
	// -0.12 to +0.04).
	var may bool
	var err error
	if len(c.Now) > 0 {
		may, err = rt.mayRoute(append(slices.Clip(c.Now), c.Leave...))
	}
	if err == nil && (may || c.AfterFault) {
		err = rt.Lock()
	}
	if err != nil {
		return nil, nil, err
	}
	for {
		marked, err := rt.routing.Marked()
		if err != nil {
			return nil, nil, steer.KernelErr(err)
		}
		add, err := rt.Routed(c.Now, marked)
		if err != nil || rt.unlock != nil || !touches(marked, add, c.Leave) {
			return marked, add, err
		}
		if err := rt.Lock(); err != nil {
			return nil, nil, err
		}
	}
}

// touches says whether a change would make or take anything of the
// marking: routed needs to add, or a leaving need of a chain there (of
// every chain, when its uplink is not known).
func touches(marked map[string]nat.UplinkSlot, add, leave []Need) bool {
	if len(add) > 0 {
		return true
	}
	for _, n := range leave {
		if u, ok := marked[n.Uplink]; ok && u.Routed[fam(n.Addr.Is6())] || n.Uplink == "" && len(marked) > 0 {
			return true
		}
	}
	return false
}

// Plan is what Change leaves to the NAT step's transaction (Into) and to
// what follows it (Settle): the marked uplinks as read, the chains to
// make, and the members to add and remove.
type Plan struct {
	marked   map[string]nat.UplinkSlot
	fresh    []nat.UplinkChain
	add, del []nat.UplinkMember
}

// Into puts p's marking into the NAT step's transaction ch: the chains to
// make, the members to add and remove, and the chains the change may
// empty, which the transaction removes unless the kernel finds one still
// in use; *unmarked then says whether it did.
func (p Plan) Into(ch *nat.Change, unmarked *bool) {
	ch.UplinkMark, ch.UplinkAdd, ch.UplinkDel = p.fresh, p.add, p.del
	ch.UplinkUnmark, ch.Unmarked = maybeEmptied(p.marked, p.del), unmarked
}

// Settle finishes p once the NAT step's transaction ch is applied: the
// routes of the chains it removed go (unroute), or, when the kernel kept
// them, those chains read anew with no member go with their routes
// (dropEmptyChains).
func (rt *Router) Settle(p Plan, ch nat.Change) error {
	if len(p.add)+len(p.del) > 0 {
		rt.step("uplink-members")
	}
	if ch.Unmarked != nil && *ch.Unmarked {
		return rt.unroute(p.marked, ch.UplinkUnmark)
	}
	return rt.dropEmptyChains(ch.UplinkUnmark)
}

// Moved is the change of attachments whose needs went from was to now,
// an IP of theirs re-homed: what now needs, and what was needed and is
// not any more.
func Moved(was, now []Need) Change {
	var leave []Need
	for _, n := range was {
		if !slices.Contains(now, n) && !slices.Contains(leave, n) {
			leave = append(leave, n)
		}
	}
	return Change{Now: now, Leave: leave}
}

// Leaving is what the change's earlier steerings (was) needed that now's
// does not: egress sources no longer leaving by the same uplink, and
// external IPs that no holder steers in any more (want: each touched IP's
// targets after the change).
func Leaving(touch []netip.Addr, was []*store.Steering, want [][]netip.Addr, now []Need, uplinkOf map[netip.Addr]string) []Need {
	var out []Need
	for _, old := range was {
		for _, n := range Needs(old, touch, uplinkOf) {
			if n.Egress && !slices.Contains(now, n) {
				out = append(out, n)
			}
		}
	}
	for i, ip := range touch {
		if len(want[i]) == 0 {
			out = append(out, Need{Uplink: uplinkOf[ip], Addr: ip, IP: ip})
		}
	}
	return out
}

// chainsFor gives each uplink of add without a slot the lowest slot that
// is neither marked nor another program's, makes the routes of each
// family an uplink does not route yet, and lists the chains the change
// is to make for them: a chain comes after its routes, so that an ADD
// that finds one may trust it. It refuses when every slot is taken.
func (rt *Router) chainsFor(add []Need, marked map[string]nat.UplinkSlot) ([]nat.UplinkChain, error) {
	var fresh []nat.UplinkChain
	for _, n := range add {
		if marked[n.Uplink].Routed[fam(n.IP.Is6())] {
			continue
		}
		c, err := rt.routeFamily(n, marked)
		if err != nil {
			return nil, err
		}
		fresh = append(fresh, c)
	}
	var errs []error
	for _, up := range distinct(fresh, func(c nat.UplinkChain) string { return c.Uplink }) {
		// A fresh family's rules and route are made without first asking
		// for them: its slot's table holds nothing of another program's
		// (freeSlot), and what of ours is there is put in place.
		var gw [2]netip.Addr
		for _, c := range fresh {
			if c.Uplink == up {
				gw[fam(c.V6)] = rt.gateways(up)[fam(c.V6)]
			}
		}
		errs = append(errs, rt.routing.EnsureRoutes(marked[up].Slot, up, rt.ups.Index(up), gw, true))
	}
	return fresh, steer.KernelErr(errors.Join(errs...))
}

// routeFamily marks n's uplink in marked as routing n's family, with the
// lowest free slot when it has none yet, and gives that family's chain.
func (rt *Router) routeFamily(n Need, marked map[string]nat.UplinkSlot) (nat.UplinkChain, error) {
	f := fam(n.IP.Is6())
	u, ok := marked[n.Uplink]
	if !ok {
		cfg := rt.routing.Config()
		s, err := rt.freeSlot(cfg, marked)
		if err != nil {
			return nat.UplinkChain{}, err
		}
		u = nat.UplinkSlot{Slot: s, Mark: cfg.Mark(s)}
	}
	u.Routed[f] = true
	marked[n.Uplink] = u
	return chainOf(n.Uplink, u, f), nil
}

// distinct lists the keys of xs once each, in their first order.
func distinct[T any](xs []T, key func(T) string) []string {
	var out []string
	for _, x := range xs {
		if k := key(x); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func (rt *Router) freeSlot(cfg slots.Config, marked map[string]nat.UplinkSlot) (int, error) {
	used := map[int]bool{}
	for _, u := range marked {
		used[u.Slot] = true
	}
	var why []string
	for s := 1; s <= cfg.Slots(); s++ {
		if used[s] {
			continue
		}
		c, err := rt.routing.Collides(s)
		if err != nil {
			return 0, steer.KernelErr(err)
		}
		if c == "" {
			return s, nil
		}
		why = append(why, c)
	}
	return 0, errkind.Errorf(errkind.Refused, "uplinkRouting: no free slot of %d for another uplink (%v); set uplinkRouting's mark or table to free ones", cfg.Slots(), why)
}

func members(ns []Need, marked map[string]nat.UplinkSlot) []nat.UplinkMember {
	var out []nat.UplinkMember
	for _, n := range ns {
		if u, ok := marked[n.Uplink]; ok && u.Routed[fam(n.IP.Is6())] {
			out = append(out, nat.UplinkMember{Slot: u.Slot, Uplink: n.Uplink, Addr: n.Addr, Egress: n.Egress})
		}
	}
	return out
}

// delMembers is each leaving need in its uplink's chain, or in every
// uplink's when its uplink is not known any more (a replay after the
// index was cleared), but never one that add puts back.
func (rt *Router) delMembers(del, add []Need, marked map[string]nat.UplinkSlot) []nat.UplinkMember {
	keep := members(add, marked)
	var out []nat.UplinkMember
	for _, n := range del {
		for name, u := range marked {
			m := nat.UplinkMember{Slot: u.Slot, Uplink: name, Addr: n.Addr, Egress: n.Egress}
			if (n.Uplink == "" || n.Uplink == name) && u.Routed[fam(n.Addr.Is6())] && !slices.Contains(keep, m) && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// maybeEmptied lists the chains that dels take members from and that the
// count read before the change says may have none left (no more than the
// change removes): the change's transaction removes them, unless the
// kernel finds one still in use.
func maybeEmptied(marked map[string]nat.UplinkSlot, dels []nat.UplinkMember) []nat.UplinkChain {
	var out []nat.UplinkChain
	for _, name := range slices.Sorted(maps.Keys(marked)) {
		u := marked[name]
		for f := range 2 {
			n := countChain(dels, name, f)
			if n > 0 && u.Routed[f] && u.Members[f] >= 0 && u.Members[f] <= n {
				out = append(out, chainOf(name, u, f))
			}
		}
	}
	return out
}

func chainOf(uplink string, u nat.UplinkSlot, f int) nat.UplinkChain {
	return nat.UplinkChain{Uplink: uplink, Slot: u.Slot, Mark: u.Mark, V6: f == 1}
}

// dropEmptyChains takes the chain, then the routes, away from each of
// maybe (maybeEmptied's) that the chains, read anew, show with no member,
// when the change's transaction could not remove them: one was still in
// use (a removal counted was not there, or a binary from before the node
// lock added to it during an upgrade), which kept the others too.
func (rt *Router) dropEmptyChains(maybe []nat.UplinkChain) error {
	if len(maybe) == 0 {
		return nil
	}
	now, err := rt.routing.Marked()
	if err != nil {
		return steer.KernelErr(err)
	}
	var gone []nat.UplinkChain
	for _, c := range maybe {
		f := fam(c.V6)
		if u, ok := now[c.Uplink]; ok && u.Routed[f] && u.Members[f] == 0 {
			gone = append(gone, chainOf(c.Uplink, u, f))
		}
	}
	return rt.unmark(now, gone)
}

// countChain counts the members of ms that go to uplink's chain of f.
func countChain(ms []nat.UplinkMember, uplink string, f int) int {
	n := 0
	for _, m := range ms {
		if m.Uplink == uplink && fam(m.Addr.Is6()) == f {
			n++
		}
	}
	return n
}

// unmark removes the chains of gone, then their routes; a family's
// suppress rule goes with its last chain. Chain first, so that a chain
// never goes without its routes: an ADD that finds one trusts it. The
// kernel refuses to delete a chain that an element still goes to
// (EBUSY: a binary from before the node lock added to it meanwhile, during
// an upgrade): then nothing is removed.
// Killed in between (uplink-unmarked), the routes without a chain are
// found by the replay (unrouteUnmarked) or by GC.
func (rt *Router) unmark(marked map[string]nat.UplinkSlot, gone []nat.UplinkChain) error {
	if len(gone) == 0 {
		return nil
	}
	if err := rt.routing.Unmark(gone); err != nil {
		if errors.Is(err, syscall.EBUSY) {
			rt.log.Info("uplink chains kept: an address came to one", "chains", gone)
			return nil
		}
		return steer.KernelErr(err)
	}
	return rt.unroute(marked, gone)
}

// unroute removes the routes of the chains gone (removed already), and
// a family's suppress rule with its last chain, as marked says: the count
// read before the change's own transaction, under the node lock, so that
// no other dataDir's change made a chain since (Lock).
func (rt *Router) unroute(marked map[string]nat.UplinkSlot, gone []nat.UplinkChain) error {
	rt.step("uplink-unmarked")
	var errs []error
	for _, c := range gone {
		rt.log.Info("uplink unmarked", "chain", c)
		var fams, last [2]bool
		fams[fam(c.V6)] = true
		last[fam(c.V6)] = !otherRoutes(marked, gone, fam(c.V6))
		errs = append(errs, rt.routing.RemoveRoutes(c.Slot, fams, last))
	}
	return steer.KernelErr(errors.Join(errs...))
}

// otherRoutes tells whether a chain of family f other than gone's stays.
func otherRoutes(marked map[string]nat.UplinkSlot, gone []nat.UplinkChain, f int) bool {
	for name, u := range marked {
		if u.Routed[f] && !slices.ContainsFunc(gone, func(c nat.UplinkChain) bool { return c.Uplink == name && fam(c.V6) == f }) {
			return true
		}
	}
	return false
}

// unrouteUnmarked removes the routes that a killed change left without a
// chain: an ADD's made before its chain (killed at uplink-routed, then
// undone), a DEL's left after its chain went (killed at
// uplink-unmarked, then finished): of a slot that routes one of del's
// uplinks, the families it routes with no chain (removeStray, as GC
// does). Only a recovery reads every table of ours for it.
func (rt *Router) unrouteUnmarked(del []Need, marked map[string]nat.UplinkSlot) error {
	var ups []string
	for _, n := range del {
		if u, ok := marked[n.Uplink]; n.Uplink != "" && (!ok || !u.Routed[fam(n.IP.Is6())]) && !slices.Contains(ups, n.Uplink) {
			ups = append(ups, n.Uplink)
		}
	}
	if len(ups) == 0 {
		return nil
	}
	st, err := rt.routing.ReadRoutes()
	if err != nil {
		return steer.KernelErr(err)
	}
	_, err = rt.removeStray(st.Slots, marked, func(sl *Slot) bool { return slices.Contains(ups, sl.Uplink) })
	return err
}
