package assigner

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/traffic"
	"github.com/external-ip/external-ip/pkg/uplinkroute"
	"github.com/external-ip/external-ip/pkg/uplinkroute/slots"
)

// fakeRouting is the node's marks, rules and tables as maps: eth0 carries
// the default route, eth1 has the gateway gw.
type fakeRouting struct {
	gw      map[string]netip.Addr
	foreign map[int]string // slot -> another program's route in its table
	marked  map[string]nat.UplinkSlot
	members map[nat.UplinkMember]bool
	routes  map[int][2]netip.Addr // slot -> its table's gateways (and rules)
	index   map[int]int           // slot -> the uplink index EnsureRoutes was given
	uplink  map[int]string        // slot -> the uplink EnsureRoutes was given
	// unseen is a member Marked does not count: one another state's ADD
	// adds after this change read the chains.
	unseen nat.UplinkMember
	// calls counts the calls of each method that reads or writes routes.
	calls map[string]int
	// locked says whether the node lock is held.
	locked bool
}

var _ uplinkroute.Routing = (*fakeRouting)(nil)

func newFakeRouting() *fakeRouting {
	return &fakeRouting{
		gw:      map[string]netip.Addr{"eth1": netip.MustParseAddr("203.0.113.254")},
		foreign: map[int]string{}, marked: map[string]nat.UplinkSlot{},
		members: map[nat.UplinkMember]bool{}, routes: map[int][2]netip.Addr{}, index: map[int]int{}, uplink: map[int]string{},
		calls: map[string]int{},
	}
}

func (r *fakeRouting) Config() slots.Config               { return slots.Default() }
func (r *fakeRouting) Off() bool                          { return false }
func (r *fakeRouting) DefaultUplink(v6 bool) (int, error) { return ethIndex, nil }
func (r *fakeRouting) Gateway(uplink string, _ int, ip netip.Addr) (netip.Addr, error) {
	r.calls["Gateway"]++
	if g := r.gw[uplink]; g.Is4() == ip.Is4() {
		return g, nil
	}
	return netip.Addr{}, nil
}
func (r *fakeRouting) Collides(s int) (string, error) {
	r.calls["Collides"]++
	return r.foreign[s], nil
}

func (r *fakeRouting) ReadRoutes() (*uplinkroute.State, error) {
	st := &uplinkroute.State{Slots: map[int]*uplinkroute.Slot{}}
	for s, gw := range r.routes {
		st.Slots[s] = &uplinkroute.Slot{N: s, Uplink: r.uplink[s], Gateway: gw, Rule: [2]bool{gw[0].IsValid(), gw[1].IsValid()}}
		st.Suppress = [2]bool{true, true}
	}
	return st, nil
}

func (r *fakeRouting) EnsureRoutes(s int, uplink string, index int, gw [2]netip.Addr, _ bool) error {
	r.calls["EnsureRoutes"]++
	have := r.routes[s]
	for f := range 2 {
		if gw[f].IsValid() {
			have[f] = gw[f]
		}
	}
	if have != ([2]netip.Addr{}) {
		r.routes[s], r.index[s], r.uplink[s] = have, index, uplink
	}
	return nil
}

func (r *fakeRouting) RemoveRoutes(s int, fams, _ [2]bool) error {
	r.calls["RemoveRoutes"]++
	gw := r.routes[s]
	for f := range 2 {
		if fams[f] {
			gw[f] = netip.Addr{}
		}
	}
	r.routes[s] = gw
	if gw == ([2]netip.Addr{}) {
		delete(r.routes, s)
	}
	return nil
}

// Marked counts each chain's members, as the kernel's use count does.
func (r *fakeRouting) Marked() (map[string]nat.UplinkSlot, error) {
	r.calls["Marked"]++
	out := maps.Clone(r.marked)
	for m := range r.members {
		if m == r.unseen {
			continue
		}
		u := out[m.Uplink]
		u.Members[famOf(m.Addr.Is6())]++
		out[m.Uplink] = u
	}
	return out, nil
}

func (r *fakeRouting) Mark(chains []nat.UplinkChain) error {
	for _, c := range chains {
		u := r.marked[c.Uplink]
		u.Slot, u.Mark = c.Slot, c.Mark
		u.Routed[famOf(c.V6)] = true
		r.marked[c.Uplink] = u
	}
	return nil
}

// Unmark refuses, as the kernel does, while a member goes to a chain.
func (r *fakeRouting) Unmark(chains []nat.UplinkChain) error {
	r.calls["Unmark"]++
	return r.unmark(chains)
}

// unmark is Unmark as a change's transaction makes it (fakeNAT.Apply).
func (r *fakeRouting) unmark(chains []nat.UplinkChain) error {
	for m := range r.members {
		if slices.ContainsFunc(chains, func(c nat.UplinkChain) bool { return c.Uplink == m.Uplink && c.V6 == m.Addr.Is6() }) {
			return fmt.Errorf("chain of %s: %s goes to it: %w", m.Uplink, m.Addr, syscall.EBUSY)
		}
	}
	for _, c := range chains {
		u := r.marked[c.Uplink]
		u.Routed[famOf(c.V6)] = false
		r.marked[c.Uplink] = u
		if u.Routed == ([2]bool{}) {
			delete(r.marked, c.Uplink)
		}
	}
	return nil
}

func (r *fakeRouting) SetMembers(add, del []nat.UplinkMember) error {
	for _, m := range del {
		delete(r.members, m)
	}
	for _, m := range add {
		r.members[m] = true
	}
	return nil
}

func (r *fakeRouting) ReadMarked() (*nat.UplinkState, error) {
	st := &nat.UplinkState{Uplinks: maps.Clone(r.marked), Members: map[int][]nat.UplinkMember{}}
	for m := range r.members {
		st.Members[m.Slot] = append(st.Members[m.Slot], m)
	}
	return st, nil
}

// LockNode counts the node lock's takings; one taken while held is an
// error, as it would wait for itself.
func (r *fakeRouting) LockNode(time.Duration) (func(), error) {
	r.calls["LockNode"]++
	if r.locked {
		return nil, errors.New("fake routing: the node lock taken twice")
	}
	r.locked = true
	return func() { r.locked = false }, nil
}

func (r *fakeRouting) Recorded() (slots.Config, error) { return r.Config(), nil }

func (r *fakeRouting) Adopt() error { return nil }

var onEth1V4 = netip.MustParseAddr("203.0.113.10")

func routedFixture(t *testing.T) (*fixture, *fakeRouting) {
	f, r := newFixture(t), newFakeRouting()
	n := newFakeNAT()
	n.routing = r
	f.steered(n, traffic.Both, ctrA4)
	f.opts.Routing = r
	return f, r
}

func TestAnIPOnASecondUplinkIsRoutedByItAndTheLastDelTakesTheRoutingAway(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	if u, ok := r.marked["eth1"]; !ok || u.Slot != 1 || u.Routed != [2]bool{true, false} {
		t.Fatalf("marked uplinks %v, want eth1 in slot 1", r.marked)
	}
	want := []nat.UplinkMember{{Slot: 1, Uplink: "eth1", Addr: onEth1V4}, {Slot: 1, Uplink: "eth1", Addr: ctrA4.Addr(), Egress: true}}
	for _, m := range want {
		if !r.members[m] {
			t.Errorf("members %v lack %+v", r.members, m)
		}
	}
	if r.routes[1][0] != r.gw["eth1"] {
		t.Errorf("slot 1 routes by %v, want eth1's gateway %s", r.routes[1], r.gw["eth1"])
	}
	// The index found for the uplink is handed on: no lookup by name.
	if eth1 := f.k.host.byName("eth1"); r.index[1] != eth1.Index {
		t.Errorf("EnsureRoutes was given index %d, want eth1's %d", r.index[1], eth1.Index)
	}
	if _, err := f.assigner().Check(attA); err != nil {
		t.Errorf("CHECK: %v", err)
	}
	f.steered(f.opts.NAT.(*fakeNAT), traffic.Both, ctrB4)
	f.add(attB, v4a) // on the default route's uplink: nothing of ours
	if len(r.marked) != 1 || len(r.members) != 2 {
		t.Errorf("an IP on the default route's uplink changed the routing: %v %v", r.marked, r.members)
	}
	f.del(attA)
	if len(r.marked)+len(r.members)+len(r.routes) != 0 {
		t.Errorf("after the DEL of the uplink's last IP: marked %v, members %v, routes %v", r.marked, r.members, r.routes)
	}
}

func TestCheckFailsWhenAnUplinksRoutesAreGoneAndGCPutsThemBack(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	delete(r.routes, 1)
	if _, err := f.assigner().Check(attA); !errors.Is(err, ErrDrift) {
		t.Fatalf("CHECK with the uplink's table gone: %v, want drift", err)
	}
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	if r.routes[1][0] != r.gw["eth1"] {
		t.Errorf("after GC slot 1 routes by %v", r.routes[1])
	}
	if _, err := f.assigner().Check(attA); err != nil {
		t.Errorf("CHECK after GC: %v", err)
	}
}

func TestGCTakesAwayTheRoutingOfAnUplinkNoRecordNeeds(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	r.marked["eth9"] = nat.UplinkSlot{Slot: 2, Mark: 0x02000000, Routed: [2]bool{true, false}}
	r.routes[3] = [2]netip.Addr{netip.MustParseAddr("192.0.2.254")}
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.marked["eth9"]; ok || len(r.routes) != 1 {
		t.Errorf("after GC: marked %v, routes %v; want only eth1's", r.marked, r.routes)
	}
}

func TestASlotOfAnotherProgramIsSkipped(t *testing.T) {
	f, r := routedFixture(t)
	r.foreign[1] = "table 4241 holds route 10.9.0.0/24 (proto 3)"
	f.add(attA, onEth1V4)
	if u := r.marked["eth1"]; u.Slot != 2 {
		t.Errorf("eth1 took slot %d, want 2: slot 1's table is another program's", u.Slot)
	}
}

func TestAnUplinkWithNoGatewayIsLeftToTheMainTable(t *testing.T) {
	f, r := routedFixture(t)
	delete(r.gw, "eth1")
	f.add(attA, onEth1V4)
	if len(r.marked)+len(r.members)+len(r.routes) != 0 {
		t.Errorf("an uplink with no gateway was routed: %v %v %v", r.marked, r.members, r.routes)
	}
}

// A DEL that reads the uplink's chain as left empty by its change, while
// another state's ADD put a member there, keeps the chain (the kernel
// refuses to delete it) and its routes: that member's flows stay routed,
// and the DEL, whose own part is done, succeeds.
func TestADelThatFindsTheChainInUseAfterAllKeepsItAndItsRoutes(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	other := nat.UplinkMember{Slot: 1, Uplink: "eth1", Addr: netip.MustParseAddr("203.0.113.99")}
	r.members[other], r.unseen = true, other
	if err := f.assigner().Del(attA); err != nil {
		t.Errorf("DEL: %v; its own part is done, and the chain it could not remove is another state's", err)
	}
	if u := r.marked["eth1"]; !u.Routed[0] || !r.members[other] {
		t.Errorf("after the DEL: eth1 %+v, members %v; want the chain kept with %s", u, r.members, other.Addr)
	}
	if r.routes[1][0] != r.gw["eth1"] || r.calls["RemoveRoutes"] != 0 {
		t.Errorf("after the DEL slot 1 routes by %v (%d removals), want eth1's gateway %s, never removed", r.routes[1], r.calls["RemoveRoutes"], r.gw["eth1"])
	}
}

// An ADD on an uplink whose chain of the family is there trusts it: one
// read of the marking (the dump the change's base check reuses), no
// gateway read, no slot check, no route or rule made (each ADD takes the
// node lock once, before it reads; a DEL once it read that it touches the
// marking); its DEL, beside another IP on the uplink, takes nothing but
// its members away (the count read before its change says members are
// left), and the uplink's last DEL removes the chain in its change's
// transaction, then the routes, with no read more.
func TestAnotherIPOnARoutedUplinkReadsOnlyTheMarking(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	// The first IP: the gateway, a free slot, its routes; the chain rides
	// in the change.
	if want := map[string]int{"LockNode": 1, "Marked": 1, "Gateway": 1, "Collides": 1, "EnsureRoutes": 1}; !maps.Equal(r.calls, want) {
		t.Errorf("the ADD of eth1's first IP called %v, want %v", r.calls, want)
	}
	f.steered(f.opts.NAT.(*fakeNAT), traffic.Both, ctrB4)
	clear(r.calls)
	f.add(attB, onEth1V4b)
	if want := map[string]int{"LockNode": 1, "Marked": 1}; !maps.Equal(r.calls, want) {
		t.Errorf("the ADD of another IP on eth1 called %v, want %v", r.calls, want)
	}
	if !r.members[nat.UplinkMember{Slot: 1, Uplink: "eth1", Addr: onEth1V4b}] {
		t.Errorf("members %v lack %s", r.members, onEth1V4b)
	}
	// A DEL reads the marking, then locks and reads it again: on the host
	// the second read takes the dump the routing record was read from.
	clear(r.calls)
	f.del(attB)
	if want := map[string]int{"LockNode": 1, "Marked": 2}; !maps.Equal(r.calls, want) {
		t.Errorf("the DEL beside another IP on eth1 called %v, want %v", r.calls, want)
	}
	// The last IP: its chain goes in the change's transaction, then its
	// routes.
	clear(r.calls)
	f.del(attA)
	if want := map[string]int{"LockNode": 1, "Marked": 2, "RemoveRoutes": 1}; !maps.Equal(r.calls, want) {
		t.Errorf("the DEL of eth1's last IP called %v, want %v", r.calls, want)
	}
}

// When the change's transaction could not take the emptied chain away,
// the DEL reads the chains again and removes it, then its routes:
// nothing of the uplink's routing is left.
func TestALastDelWhoseTransactionKeptTheChainRemovesItAfter(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	f.opts.NAT.(*fakeNAT).keepChains = true
	clear(r.calls)
	f.del(attA)
	if want := map[string]int{"LockNode": 1, "Marked": 3, "Unmark": 1, "RemoveRoutes": 1}; !maps.Equal(r.calls, want) {
		t.Errorf("the DEL called %v, want %v", r.calls, want)
	}
	if len(r.marked)+len(r.members)+len(r.routes) != 0 {
		t.Errorf("after the DEL: marked %v, members %v, routes %v; want nothing", r.marked, r.members, r.routes)
	}
}

// GC takes away an uplink's chain and routes of a family that no record
// routes by it, and keeps the other family's.
func TestGCTakesAwayTheFamilyOfAnUplinkNoRecordNeeds(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	u := r.marked["eth1"]
	u.Routed[1] = true
	r.marked["eth1"] = u
	v6gw := netip.MustParseAddr("2001:db8:5::fe")
	r.routes[1] = [2]netip.Addr{r.routes[1][0], v6gw}
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	if got := r.marked["eth1"].Routed; got != [2]bool{true, false} {
		t.Errorf("after GC eth1 routes %v, want IPv4 only", got)
	}
	if r.routes[1] != [2]netip.Addr{r.gw["eth1"]} {
		t.Errorf("after GC slot 1 routes by %v, want eth1's IPv4 gateway only", r.routes[1])
	}
}

// famOf indexes the fake's per-family fields as the kernel's: 0 IPv4, 1 IPv6.
func famOf(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

// A steered ADD, DEL and GC on the default route's uplink (eth0, v4a) of
// a node that routes nothing take no node lock: only what may route, or
// mend the routing, pays for it.
func TestChangesOnTheDefaultUplinkOfANodeThatRoutesNothingTakeNoNodeLock(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, v4a)
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	f.del(attA)
	if n := r.calls["LockNode"]; n != 0 || r.calls["Marked"] == 0 {
		t.Errorf("ADD, GC and DEL on eth0 took the node lock %d times (read the marking %d times), want none", n, r.calls["Marked"])
	}
}
