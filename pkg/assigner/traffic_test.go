package assigner

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// fakeNAT is the table as a map, and the conntrack deletions asked for.
type fakeNAT struct {
	st       nat.State
	forgot   []string
	probeErr error
	// stillSteered lists the forgotten targets that the table still
	// steered to when they were forgotten.
	stillSteered []string
	// fresh is the Fresh of the last Apply.
	fresh map[netip.Addr]bool
	// untracked says the node has no conntrack entry; forgetErr is what
	// Forget returns.
	untracked bool
	forgetErr error
	// neverSeen are the addresses our rules never recorded a flow of;
	// unseen what Unsee was given.
	neverSeen map[netip.Addr]bool
	unseen    []netip.Addr
	// passes is len(forgot) at each StartPass.
	passes []int
	// routing keeps the uplink sets' members an Apply changes, as the
	// kernel's table keeps them beside the rest (routedFixture sets it).
	routing *fakeRouting
	// keepChains makes Apply's transaction leave the chains it was to
	// remove, as when a member of another chain was refused with them.
	keepChains bool
}

func (n *fakeNAT) Tracked() (bool, error) { return !n.untracked, nil }

// Seen says every address had flows but those in neverSeen.
func (n *fakeNAT) Seen(addr netip.Addr) (bool, error) { return !n.neverSeen[addr], nil }

func (n *fakeNAT) Unsee(addrs []netip.Addr) error {
	n.unseen = append(n.unseen, addrs...)
	return nil
}

func newFakeNAT() *fakeNAT {
	return &fakeNAT{st: nat.State{Ingress: map[netip.Addr][]netip.Addr{}, Egress: map[nat.EgressKey]netip.Addr{}}}
}

func (n *fakeNAT) SetIngress(ip netip.Addr, targets []netip.Addr) error {
	n.st.Present = true
	if len(targets) == 0 {
		delete(n.st.Ingress, ip)
		return nil
	}
	n.st.Ingress[ip] = slices.Clone(targets)
	return nil
}

func (n *fakeNAT) SetEgress(k nat.EgressKey, ip netip.Addr) error {
	n.st.Present = true
	n.st.Egress[k] = ip
	return nil
}

func (n *fakeNAT) DelEgress(k nat.EgressKey) error { delete(n.st.Egress, k); return nil }

func (n *fakeNAT) EgressIP(k nat.EgressKey) (netip.Addr, bool, error) {
	ip, ok := n.st.Egress[k]
	return ip, ok, nil
}

func (n *fakeNAT) SetHairpin(h netip.Prefix) error {
	if !slices.Contains(n.st.Hairpin, h) {
		n.st.Hairpin = append(n.st.Hairpin, h)
	}
	return nil
}

func (n *fakeNAT) DelHairpin(h netip.Prefix) error {
	n.st.Hairpin = slices.DeleteFunc(n.st.Hairpin, func(x netip.Prefix) bool { return x == h })
	return nil
}

func (n *fakeNAT) Apply(ch nat.Change) error {
	n.fresh = ch.Fresh
	for ip, targets := range ch.Ingress {
		n.SetIngress(ip, targets)
	}
	for _, k := range ch.DelEgress {
		n.DelEgress(k)
	}
	for k, ip := range ch.Egress {
		n.SetEgress(k, ip)
	}
	for _, h := range ch.DelHairpin {
		n.DelHairpin(h)
	}
	for _, h := range ch.Hairpin {
		n.SetHairpin(h)
	}
	if len(ch.UplinkAdd)+len(ch.UplinkDel) > 0 {
		// The uplink sets are the routing fake's to keep (routedFixture).
		if err := n.routing.Mark(ch.UplinkMark); err != nil {
			return err
		}
		if err := n.routing.SetMembers(ch.UplinkAdd, ch.UplinkDel); err != nil {
			return err
		}
	}
	// The chains go in the same transaction unless one still has a
	// member: the kernel then refuses it, and Apply makes it without them.
	if ch.Unmarked != nil {
		*ch.Unmarked = len(ch.UplinkUnmark) > 0 && !n.keepChains && n.routing.unmark(ch.UplinkUnmark) == nil
	}
	return nil
}

func (n *fakeNAT) Read() (*nat.State, error) { st := n.st; return &st, nil }
func (n *fakeNAT) Ensure() error             { n.st.Present = true; return nil }
func (n *fakeNAT) Probe() error              { return n.probeErr }

// StartPass records how many Forgets came before it.
func (n *fakeNAT) StartPass() { n.passes = append(n.passes, len(n.forgot)) }

func (n *fakeNAT) Forget(ip, target netip.Addr) error {
	n.forgot = append(n.forgot, fmt.Sprintf("%s->%v", ip, target))
	if _, steered := n.st.Ingress[ip]; steered && (!target.IsValid() || slices.Contains(n.st.Ingress[ip], target)) {
		n.stillSteered = append(n.stillSteered, fmt.Sprintf("%s->%v", ip, target))
	}
	return n.forgetErr
}

var (
	ctrA4 = netip.MustParsePrefix("10.88.0.5/24")
	ctrB4 = netip.MustParsePrefix("10.88.0.6/24")
)

func (f *fixture) steered(n *fakeNAT, traffic traffic.Mode, container ...netip.Prefix) {
	f.opts.NAT, f.opts.Traffic, f.opts.Container = n, traffic, container
}

// checkAs is a CHECK of att as a runtime sends it: with the prevResult of
// att's own ADD, which gives its container the addresses container (the
// fixture's Container is the last ADD's).
func (f *fixture) checkAs(att Attachment, container ...netip.Prefix) ([]netip.Addr, error) {
	opts := f.opts
	opts.Container = container
	a := newAssigner(opts, f.k)
	a.step = func(string) {}
	return a.Check(att)
}

// twoHolders is a fixture whose a (ctrA4) and b (ctrB4) both hold v4a.
func twoHolders(t *testing.T) (*fixture, *fakeNAT) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4a)
	f.steered(n, traffic.Both, ctrB4)
	f.add(attB, v4a)
	return f, n
}

func TestSharedIPSteersToEveryHolderAndForgetsTheOneThatLeaves(t *testing.T) {
	f, n := twoHolders(t)
	if got := n.st.Ingress[v4a]; len(got) != 2 || !slices.Contains(got, ctrA4.Addr()) || !slices.Contains(got, ctrB4.Addr()) {
		t.Fatalf("%s steers to %v, want both holders", v4a, got)
	}
	if n.st.Egress[nat.EgressKey{Source: ctrB4.Addr(), Uplink: "eth0"}] != v4a {
		t.Errorf("egress of b is %v, want from %s via eth0", n.st.Egress, v4a)
	}
	f.del(attB)
	f.forget()
	if got := n.st.Ingress[v4a]; !slices.Equal(got, []netip.Addr{ctrA4.Addr()}) {
		t.Errorf("after b's DEL %s steers to %v, want only a", v4a, got)
	}
	if !slices.Equal(n.forgot, []string{v4a.String() + "->" + ctrB4.Addr().String()}) {
		t.Errorf("after b's DEL conntrack deletions were %v, want b's flows only", n.forgot)
	}
	if _, ok := n.st.Egress[nat.EgressKey{Source: ctrB4.Addr(), Uplink: "eth0"}]; ok {
		t.Error("b's egress rule outlived its DEL")
	}
	f.del(attA)
	f.forget()
	if len(n.st.Ingress)+len(n.st.Egress) != 0 {
		t.Errorf("after the last DEL the table still has %+v", n.st)
	}
	if want := []netip.Prefix{ctrA4.Masked()}; !slices.Equal(n.st.Hairpin, want) {
		t.Errorf("after the last DEL the hairpin subnets are %v, want %v kept for GC", n.st.Hairpin, want)
	}
	if last := n.forgot[len(n.forgot)-1]; last != v4a.String()+"->invalid IP" {
		t.Errorf("the last holder's DEL forgot %q, want every flow of %s", last, v4a)
	}
}

func TestEgressComesFromTheFirstIPOfTheFamilyInRequestOrder(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Egress, ctrA4)
	f.add(attA, v4b, v4a)
	if got := n.st.Egress[nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth0"}]; got != v4b {
		t.Errorf("egress from %v, want %s, the first requested", got, v4b)
	}
	if len(n.st.Ingress)+len(n.st.Hairpin) != 0 {
		t.Errorf("traffic egress made ingress rules: %+v", n.st)
	}
}

func TestAReAddWithTrafficNoneRemovesTheEarlierRules(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4a)
	f.steered(n, traffic.None, ctrA4)
	f.add(attA, v4a)
	if len(n.st.Ingress)+len(n.st.Egress) != 0 {
		t.Errorf("re-ADD with traffic none left %+v", n.st)
	}
	// The hairpin subnet is shared: it stays while the node holds an IP
	// (it steers nothing) and GC removes it once no record has it.
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	if len(n.st.Hairpin) != 0 {
		t.Errorf("GC left the hairpin subnets %v that no record has", n.st.Hairpin)
	}
}

// Attachments on one subnet share its hairpin element: one ADD's change
// does not grow with the attachments, and a DEL leaves the element to
// the others.
func TestAttachmentsOnOneSubnetShareItsHairpinElement(t *testing.T) {
	f, n := twoHolders(t)
	if want := []netip.Prefix{ctrA4.Masked()}; !slices.Equal(n.st.Hairpin, want) {
		t.Fatalf("two holders on %s made hairpin elements %v, want %v", ctrA4.Masked(), n.st.Hairpin, want)
	}
	f.del(attB)
	if _, err := f.checkAs(attA, ctrA4); err != nil {
		t.Errorf("CHECK of a after b's DEL: %v", err)
	}
}

func TestAFailedAddTakesItsRulesBackOut(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	_, err := f.assigner().Add(attA, []netip.Addr{v4a}, hooks{announce: func([]announce.Target) error { return errors.New("no uplink") }})
	if err == nil {
		t.Fatal("ADD with a failing announcement succeeded")
	}
	if len(n.st.Ingress)+len(n.st.Egress)+len(n.st.Hairpin) != 0 {
		t.Errorf("the undone ADD left %+v", n.st)
	}
}

func TestReadyFailsWhenNftablesCannotBeUsed(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	n.probeErr = errors.New("nf_tables nat chains cannot be used: operation not supported")
	f.steered(n, traffic.Both)
	err := f.assigner().Ready(true, false)
	if err == nil || !strings.Contains(err.Error(), "nf_tables") {
		t.Fatalf("Ready with nf_tables unusable: %v, want an error naming nf_tables", err)
	}
	f.steered(n, traffic.None)
	if err := f.assigner().Ready(true, false); err != nil {
		t.Errorf("Ready with traffic none asked nf_tables: %v", err)
	}
}

func TestCheckFailsWhenTheTableLostARule(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4a)
	if _, err := f.assigner().Check(attA); err != nil {
		t.Fatalf("CHECK right after ADD: %v", err)
	}
	n.st.Ingress[v4a] = []netip.Addr{ctrB4.Addr()}
	if _, err := f.assigner().Check(attA); !errors.Is(err, ErrDrift) || !strings.Contains(err.Error(), v4a.String()) {
		t.Fatalf("CHECK with the rule pointing elsewhere: %v, want drift naming %s", err, v4a)
	}
	if _, err := f.assigner().Repair(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.assigner().Check(attA); err != nil {
		t.Errorf("CHECK after repair: %v", err)
	}
}

// A spread that still names the attachment's target but also one no
// holder has sends a share of new flows elsewhere: that too is drift.
func TestCheckFailsWhenTheSpreadAlsoPointsAtATargetNoHolderHas(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4a)
	n.st.Ingress[v4a] = []netip.Addr{ctrA4.Addr(), ctrB4.Addr()}
	_, err := f.assigner().Check(attA)
	if !errors.Is(err, ErrDrift) || !strings.Contains(err.Error(), ctrB4.Addr().String()) {
		t.Fatalf("CHECK with a stray target in the spread: %v, want drift naming %s", err, ctrB4.Addr())
	}
	if _, err := f.assigner().Repair(); err != nil {
		t.Fatal(err)
	}
	if got := n.st.Ingress[v4a]; !slices.Equal(got, []netip.Addr{ctrA4.Addr()}) {
		t.Errorf("repair left the spread at %v", got)
	}
}

// A leaving target's conntrack entries are deleted once the table no
// longer steers to it: deleted before, a new flow in between would be
// DNATed to it again and its entry, kept by the client's retransmissions,
// would black-hole it for minutes.
func TestALeavingTargetIsForgottenOnlyOnceTheTableNoLongerSteersToIt(t *testing.T) {
	f, n := twoHolders(t)
	f.del(attB)
	f.forget()
	f.del(attA)
	f.forget()
	if len(n.forgot) != 2 || len(n.stillSteered) != 0 {
		t.Errorf("forgot %v, of which the table still steered to %v at the time, want none", n.forgot, n.stillSteered)
	}
}

// A prevResult naming an address the node itself holds as the
// container's would DNAT the external IP to the node and SNAT the node's
// own flows from that address: ADD refuses it and changes nothing.
func TestAContainerAddressTheNodeHoldsIsRefusedAndNothingChanges(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, netip.PrefixFrom(nodeIP, 24))
	_, err := f.assigner().Add(attA, []netip.Addr{v4a}, nil)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), nodeIP.String()) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("ADD with the node's address as the container's: %v, want one line refusing %s", err, nodeIP)
	}
	if n.st.Present || len(n.st.Egress) != 0 {
		t.Errorf("the refused ADD steered: %+v", n.st)
	}
	assertUntouched(t, f)
}

// When GC re-homes an IP whose uplink vanished, the egress of its holders
// follows it: the record and the table send the container's flows from
// the IP through the uplink it now leaves by, and CHECK agrees.
func TestGCMovesTheEgressOfAReHomedIPToItsNewUplink(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4other) // via eth1
	if n.st.Egress[nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth1"}] != v4other {
		t.Fatalf("setup: egress %v, want via eth1", n.st.Egress)
	}
	f.k.dropUplink("eth1")
	viaEth0(f)
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	want := map[nat.EgressKey]netip.Addr{{Source: ctrA4.Addr(), Uplink: "eth0"}: v4other}
	if fmt.Sprint(n.st.Egress) != fmt.Sprint(want) {
		t.Errorf("after GC egress is %v, want %v", n.st.Egress, want)
	}
	if _, err := f.assigner().Check(attA); err != nil {
		t.Errorf("CHECK after GC: %v", err)
	}
	f.del(attA)
	if len(n.st.Egress) != 0 {
		t.Errorf("DEL left egress %v", n.st.Egress)
	}
}

// Only the first holder's ADD of an IP may make its chain with additions
// only: a second holder's, or a re-ADD, rewrites a chain that exists.
func TestOnlyTheFirstHoldersAddOfAnIPIsFresh(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4a)
	if !n.fresh[v4a] {
		t.Errorf("the first ADD of %s was not fresh: %v", v4a, n.fresh)
	}
	f.add(attA, v4a)
	if n.fresh[v4a] {
		t.Errorf("a re-ADD of %s was fresh", v4a)
	}
	f.steered(n, traffic.Both, ctrB4)
	f.add(attB, v4a)
	if n.fresh[v4a] {
		t.Errorf("the second holder's ADD of %s was fresh", v4a)
	}
	f.del(attB)
	if n.fresh[v4a] {
		t.Errorf("a DEL leaving %s to its first holder was fresh", v4a)
	}
}

// addGarbling adds att for ip with an Assigner that, at the NAT step,
// overwrites the record and index entry the change has just written: a
// steer that read its own writes back would fail to decode them.
func (f *fixture) addGarbling(att Attachment, ip netip.Addr) error {
	a := f.assigner()
	a.step = func(step string) {
		if step != "nat" {
			return
		}
		for _, p := range []string{filepath.Join(f.stateDir(), "att", att.Key()+".json"), filepath.Join(f.stateDir(), "ip", ip.String()+".json")} {
			if err := os.WriteFile(p, []byte("garbled"), 0o600); err != nil {
				f.t.Fatal(err)
			}
		}
	}
	_, err := a.Add(att, []netip.Addr{ip}, nil)
	return err
}

func TestSteeringTakesTheChangesOwnWritesFromMemoryAndTheOtherHoldersFromTheirFiles(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	if err := f.addGarbling(attA, v4a); err != nil {
		t.Fatalf("a new IP's steered ADD read back what it had just written: %v", err)
	}
	if got := n.st.Ingress[v4a]; !slices.Equal(got, []netip.Addr{ctrA4.Addr()}) {
		t.Fatalf("%s steers to %v, want %s", v4a, got, ctrA4.Addr())
	}
	// A second holder, added the same way: a's target can only come from
	// a's record on disk.
	f, n = newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4a)
	f.steered(n, traffic.Both, ctrB4)
	if err := f.addGarbling(attB, v4a); err != nil {
		t.Fatalf("a second holder's steered ADD: %v", err)
	}
	if got := n.st.Ingress[v4a]; len(got) != 2 || !slices.Contains(got, ctrA4.Addr()) || !slices.Contains(got, ctrB4.Addr()) {
		t.Errorf("%s steers to %v, want a's target read from its record and b's own", v4a, got)
	}
}
