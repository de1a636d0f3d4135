package uplinkroute

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// Protocol tags every rule and route of ours (`ip rule` and `ip route`
// print it as "proto 225"): an object without it is never ours.
const Protocol = 225

// Slot is one routed uplink as the kernel has it.
type Slot struct {
	N      int
	Uplink string
	// Gateway is the default route's gateway of each family in the
	// slot's table (invalid: none); Rule whether its fwmark rule is there.
	Gateway [2]netip.Addr
	Rule    [2]bool
}

// State is every rule and route of ours, and what collides with them.
type State struct {
	Slots    map[int]*Slot
	Suppress [2]bool // the suppress rule of each family
	// Foreign names the rules and routes of other programs in our tables.
	Foreign []string
}

// fam indexes a Slot's per-family fields: 0 IPv4, 1 IPv6.
func fam(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

var families = [2]int{netlink.FAMILY_V4, netlink.FAMILY_V6}

// Routes changes and reads our rules and tables over one netlink socket.
type Routes struct {
	c      slots.Config
	h      *netlinksafe.Handle
	strict *netlinksafe.Handle
	// main caches the main table of each family (true: IPv6), via its
	// routes through one interface.
	main map[bool][]netlink.Route
	via  map[viaKey][]netlink.Route
	// dumps counts the dumps asked for (each attempt): the tests hold
	// the hot paths to their number, which is their cost.
	dumps int
	// links counts the interfaces looked up by name, for the same tests.
	links int
}

// Open makes no change; the socket is opened on first use.
func Open(c slots.Config) *Routes { return &Routes{c: c} }

func (r *Routes) nl() (*netlinksafe.Handle, error) {
	if r.h == nil {
		h, err := netlinksafe.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("opening a netlink socket: %w", err)
		}
		r.h = &h
	}
	return r.h, nil
}

// tables is a socket for the dumps of one table: with strict checking the
// kernel dumps only the table asked for, where it otherwise sends every
// table (the local table has a route per external IP) for us to filter.
// Rule dumps cannot go on it: the library's request fails the check.
func (r *Routes) tables() (*netlinksafe.Handle, error) {
	if r.strict == nil {
		h, err := netlinksafe.NewHandle(unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("opening a netlink socket: %w", err)
		}
		if h.SetStrictCheck(true) != nil {
			h.Close()
			return r.nl() // filtered here instead
		}
		r.strict = &h
	}
	return r.strict, nil
}

// tableRoutes lists table's routes of family f.
func (r *Routes) tableRoutes(f, table int) ([]netlink.Route, error) {
	h, err := r.tables()
	if err != nil {
		return nil, err
	}
	var rs []netlink.Route
	err = r.retryDump(func() (err error) {
		rs, err = h.RouteListFiltered(f, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		return err
	})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil // strict: a table that does not exist yet
	}
	if err != nil {
		return nil, fmt.Errorf("listing table %d: %w", table, err)
	}
	return rs, nil
}

// Close releases the socket.
func (r *Routes) Close() {
	for _, h := range []**netlinksafe.Handle{&r.h, &r.strict} {
		if *h != nil {
			(*h).Close()
			*h = nil
		}
	}
}

// Read lists our rules and our slots' tables.
func (r *Routes) Read() (*State, error) {
	h, err := r.nl()
	if err != nil {
		return nil, err
	}
	st := &State{Slots: map[int]*Slot{}}
	if err := r.readRules(h, st); err != nil {
		return nil, err
	}
	if r.c.Slots() > perTableMost {
		return st, r.readAllTables(h, st)
	}
	for s := 1; s <= r.c.Slots(); s++ {
		if err := r.readTable(h, st, s); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// perTableMost is the most slots Read dumps one table at a time. A dump
// of an empty table costs little, but a mark of 16 bits allows 65,535
// slots (over a second of dumps, under the dataDir lock); past it, one
// dump of every table, filtered here, costs what the node's routes cost
// whatever the mark's width.
const perTableMost = 16

// readAllTables reads every slot's table of both families from one dump
// of all tables: our routes and other programs' in our tables, also
// where no rule looks the table up (a change killed between its route
// and its rule).
func (r *Routes) readAllTables(h *netlinksafe.Handle, st *State) error {
	var routes []netlink.Route
	err := r.retryDump(func() (err error) {
		routes, err = h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{}, netlink.RT_FILTER_TABLE)
		return err
	})
	if err != nil {
		return fmt.Errorf("listing routes: %w", err)
	}
	for _, rt := range routes {
		if s := rt.Table - r.c.Table; s >= 1 && s <= r.c.Slots() {
			r.readRoute(h, st, s, rt)
		}
	}
	return nil
}

// readRules reads the rules of both families from one dump (family
// unspecified): Collides on a fresh slot's ADD, and Read, asked for one
// dump per family before.
func (r *Routes) readRules(h *netlinksafe.Handle, st *State) error {
	var rules []netlink.Rule
	err := r.retryDump(func() (err error) { rules, err = h.RuleList(netlink.FAMILY_ALL); return err })
	if err != nil {
		return fmt.Errorf("listing rules: %w", err)
	}
	for _, ru := range rules {
		// Only IPv4 and IPv6 have rules of ours; any other family's rule
		// can still look up one of our tables.
		r.readRule(st, fam(ru.Family == netlink.FAMILY_V6), ru)
	}
	return nil
}

// retryDump repeats a dump that a concurrent change interrupted.
func (r *Routes) retryDump(f func() error) error {
	var err error
	for range 3 {
		r.dumps++
		if err = f(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return err
		}
	}
	return err
}

func (st *State) slot(s int) *Slot {
	if st.Slots[s] == nil {
		st.Slots[s] = &Slot{N: s}
	}
	return st.Slots[s]
}

func (r *Routes) readRule(st *State, i int, ru netlink.Rule) {
	ours := ru.Protocol == Protocol
	inRange := ru.Table > r.c.Table && ru.Table <= r.c.Table+r.c.Slots()
	switch {
	case ours && ru.Priority == r.c.Priority && ru.Table == unix.RT_TABLE_MAIN && ru.SuppressPrefixlen == 0:
		st.Suppress[i] = true
	case ours && ru.Priority == r.c.Priority+1 && inRange && ru.Mask != nil && *ru.Mask == r.c.Mask &&
		r.c.SlotOf(ru.Mark) == ru.Table-r.c.Table:
		st.slot(ru.Table - r.c.Table).Rule[i] = true
	case !ours && inRange:
		st.Foreign = append(st.Foreign, fmt.Sprintf("rule %s looks up table %d", ruleText(ru), ru.Table))
	}
}

func ruleText(ru netlink.Rule) string {
	return fmt.Sprintf("pref %d (proto %d)", ru.Priority, ru.Protocol)
}

// readTable reads slot s's table of both families from one dump (family
// unspecified: the kernel dumps each family's table in turn, with strict
// checking only that table); it was one dump per family.
func (r *Routes) readTable(h *netlinksafe.Handle, st *State, s int) error {
	table := r.c.TableOf(s)
	routes, err := r.tableRoutes(netlink.FAMILY_ALL, table)
	if err != nil {
		return err
	}
	for _, rt := range routes {
		if rt.Table == table { // else a kernel that sent other tables too
			r.readRoute(h, st, s, rt)
		}
	}
	return nil
}

// readRoute notes rt, a route of slot s's table: ours, or another
// program's.
func (r *Routes) readRoute(h *netlinksafe.Handle, st *State, s int, rt netlink.Route) {
	if int(rt.Protocol) != Protocol || rt.Dst != nil && !isDefault(rt.Dst) {
		st.Foreign = append(st.Foreign, fmt.Sprintf("table %d holds route %s (proto %d)", rt.Table, rt.Dst, rt.Protocol))
		return
	}
	sl := st.slot(s)
	sl.Uplink = linkName(h, rt.LinkIndex)
	if gw, ok := netip.AddrFromSlice(rt.Gw); ok {
		sl.Gateway[fam(rt.Family == netlink.FAMILY_V6)] = gw.Unmap()
	}
}

func isDefault(n *net.IPNet) bool { ones, _ := n.Mask.Size(); return ones == 0 }

func linkName(h *netlinksafe.Handle, index int) string {
	l, err := h.LinkByIndex(index)
	if err != nil {
		return "#" + strconv.Itoa(index)
	}
	return l.Attrs().Name
}

// Collides says why slot s cannot be ours, "" when it can: another
// program's rule looks up its table, or its table holds another
// program's routes.
func (r *Routes) Collides(s int) (string, error) {
	h, err := r.nl()
	if err != nil {
		return "", err
	}
	st := &State{Slots: map[int]*Slot{}}
	if err := r.readRules(h, st); err != nil {
		return "", err
	}
	if err := r.readTable(h, st, s); err != nil {
		return "", err
	}
	return st.Collides(r.c, s), nil
}

// Collides is Routes.Collides from a State already read.
func (st *State) Collides(c slots.Config, s int) string {
	t := "table " + strconv.Itoa(c.TableOf(s))
	for _, f := range st.Foreign {
		if strings.HasSuffix(f, t) || strings.HasPrefix(f, t+" ") {
			return f
		}
	}
	return ""
}

// Ensure makes slot s route flows marked with it out of uplink: the
// suppress rule, the slot's rule and table route for each family with a
// gateway, and src_valid_mark on the uplink. What is there already is
// kept, but for replace, which puts the slot's route to gw in place of
// whatever route of the slot is there (GC, when the gateway moved), and
// makes the rules without asking first (also a fresh slot's). Index is
// the uplink's interface index when the caller knows it (0: looked up by
// name, one more request).
func (r *Routes) Ensure(s int, uplink string, index int, gw [2]netip.Addr, replace bool) error {
	h, err := r.nl()
	if err != nil {
		return err
	}
	for i := range families {
		if !gw[i].IsValid() {
			continue
		}
		if !replace {
			// An ADD on an uplink already routed: one dump instead of the
			// five requests of making sure; CHECK and GC see the rest.
			if have, err := r.hasRules(h, i, s); err != nil || have {
				if err != nil {
					return err
				}
				continue
			}
		}
		if index == 0 {
			r.links++
			link, err := h.LinkByName(uplink)
			if err != nil {
				return fmt.Errorf("uplink %s: %w", uplink, err)
			}
			index = link.Attrs().Index
		}
		if err := r.ensureFamily(h, i, s, index, gw[i], replace); err != nil {
			return err
		}
		if i == 0 {
			if err := setSysctl("ipv4/conf/"+uplink+"/src_valid_mark", 1); err != nil {
				return err
			}
		}
	}
	return nil
}

// hasRules tells whether slot s has its rule and the suppress rule of
// family i.
func (r *Routes) hasRules(h *netlinksafe.Handle, i, s int) (bool, error) {
	var rules []netlink.Rule
	err := r.retryDump(func() (err error) { rules, err = h.RuleList(families[i]); return err })
	if err != nil {
		return false, fmt.Errorf("listing rules: %w", err)
	}
	st := &State{Slots: map[int]*Slot{}}
	for _, ru := range rules {
		r.readRule(st, i, ru)
	}
	return st.Suppress[i] && st.Slots[s] != nil && st.Slots[s].Rule[i], nil
}

func (r *Routes) ensureFamily(h *netlinksafe.Handle, i, s, index int, gw netip.Addr, replace bool) error {
	rt := r.route(i, s, index, gw)
	add := h.RouteAdd
	if replace {
		add = h.RouteReplace
	}
	if err := add(rt); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("adding default via %s to table %d: %w", gw, rt.Table, err)
	}
	for _, ru := range []*netlink.Rule{r.suppressRule(i), r.slotRule(i, s)} {
		if err := h.RuleAdd(ru); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("adding rule pref %d: %w", ru.Priority, err)
		}
	}
	return nil
}

func (r *Routes) route(i, s, index int, gw netip.Addr) *netlink.Route {
	bitsLen := 32
	if i == 1 {
		bitsLen = 128
	}
	zero := net.IPv4zero
	if i == 1 {
		zero = net.IPv6zero
	}
	rt := &netlink.Route{
		LinkIndex: index, Table: r.c.TableOf(s), Protocol: Protocol, Family: families[i],
		Dst: &net.IPNet{IP: zero, Mask: net.CIDRMask(0, bitsLen)}, Gw: gw.AsSlice(),
	}
	if i == 0 {
		// The gateway is on the uplink's link by how it was learned; an
		// uplink with no IPv4 address of its own has no connected route
		// that would tell the kernel so.
		rt.Flags = int(netlink.FLAG_ONLINK)
	}
	return rt
}

func (r *Routes) suppressRule(i int) *netlink.Rule {
	ru := netlink.NewRule()
	ru.Family, ru.Priority, ru.Table, ru.Protocol = families[i], r.c.Priority, unix.RT_TABLE_MAIN, Protocol
	zero, mask := uint32(0), r.c.Mask
	ru.Mark, ru.Mask, ru.Invert, ru.SuppressPrefixlen = zero, &mask, true, 0
	return ru
}

func (r *Routes) slotRule(i, s int) *netlink.Rule {
	ru := netlink.NewRule()
	mask := r.c.Mask
	ru.Family, ru.Priority, ru.Table, ru.Protocol = families[i], r.c.Priority+1, r.c.TableOf(s), Protocol
	ru.Mark, ru.Mask = r.c.Mark(s), &mask
	return ru
}

// Remove takes slot s's rule and route of each family of fams away, and
// the suppress rule of each family of last (the caller's last slot of
// that family); slot 0 is none, for suppress rules alone. What is
// already gone is no error.
func (r *Routes) Remove(s int, fams, last [2]bool) error {
	h, err := r.nl()
	if err != nil {
		return err
	}
	var errs []error
	for i := range families {
		if last[i] {
			errs = append(errs, ignoreGone(h.RuleDel(r.suppressRule(i))))
		}
		if s == 0 || !fams[i] {
			continue
		}
		errs = append(errs, ignoreGone(h.RuleDel(r.slotRule(i, s))))
		// Our table holds one route of ours per family, the default one
		// (Ensure): deleting it by table, destination and protocol needs
		// no listing of the table first.
		errs = append(errs, ignoreGone(h.RouteDel(r.ourDefault(i, s))))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing the rules and table %d of uplink slot %d: %w", r.c.TableOf(s), s, err)
	}
	return nil
}

// ourDefault matches slot s's default route of family i, whatever its
// gateway and interface, but no other program's (the protocol).
func (r *Routes) ourDefault(i, s int) *netlink.Route {
	rt := r.route(i, s, 0, netip.Addr{})
	rt.Flags = 0
	return rt
}

func ignoreGone(err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

func setSysctl(key string, want int) error {
	path := "/proc/sys/net/" + key
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(want) {
		return nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(want)), 0o644); err != nil {
		return fmt.Errorf("setting net.%s to %d: %w", strings.ReplaceAll(key, "/", "."), want, err)
	}
	return nil
}
