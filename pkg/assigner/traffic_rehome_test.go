package assigner

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/steer"
	"github.com/external-ip/external-ip/pkg/traffic"
)

var ctrC4 = netip.MustParsePrefix("10.88.0.7/24")

// twoHoldersOnEth1 is a fixture whose a (ctrA4) and b (ctrB4) both hold
// v4other through eth1, which then vanishes, v4other's route moving to eth0.
func twoHoldersOnEth1(t *testing.T) (*fixture, *fakeNAT) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4other)
	f.steered(n, traffic.Both, ctrB4)
	f.add(attB, v4other)
	f.k.dropUplink("eth1")
	viaEth0(f)
	return f, n
}

// An ADD that re-homes a held IP moves the egress of the IP's other
// holders with it at once, in the table and their records: waiting for
// the next GC leaves their flows leaving by eth0 unmatched, masqueraded.
func TestAnAddThatReHomesAnIPMovesTheOtherHoldersEgressWithoutAGC(t *testing.T) {
	f, n := twoHoldersOnEth1(t)
	f.steered(n, traffic.Both, ctrC4)
	f.add(attC, v4other)
	want := map[nat.EgressKey]netip.Addr{}
	for _, c := range []netip.Prefix{ctrA4, ctrB4, ctrC4} {
		want[nat.EgressKey{Source: c.Addr(), Uplink: "eth0"}] = v4other
	}
	if fmt.Sprint(n.st.Egress) != fmt.Sprint(want) {
		t.Errorf("after the re-homing ADD egress is %v, want %v", n.st.Egress, want)
	}
	d := readDisk(t, f.stateDir())
	for att, ctr := range map[Attachment]netip.Prefix{attA: ctrA4, attB: ctrB4} {
		eg := steer.EgressOf(d.records[att.Key()].Steering)
		if len(eg) != 1 || eg[0].Uplink != "eth0" {
			t.Errorf("%s's record keeps egress %+v, want one rule via eth0", att, eg)
		}
		if _, err := f.checkAs(att, ctr); err != nil {
			t.Errorf("CHECK of %s after the re-homing ADD: %v", att, err)
		}
	}
}

// A record whose egress names an uplink its IP no longer leaves by (an
// invocation re-homed the IP and stopped before moving the rule) is drift
// even though the table still has the rule: no flow leaves by that uplink.
func TestCheckFailsWhenAnEgressRuleNamesAnUplinkTheIPNoLongerLeavesBy(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4other) // via eth1
	index := filepath.Join(f.stateDir(), "ip", v4other.String()+".json")
	var e ipEntry
	decodeFile(t, index, &e)
	e.Uplink = "eth0"
	data, _ := json.Marshal(e)
	if err := os.WriteFile(index, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := f.assigner().Check(attA)
	msg := fmt.Sprint(err)
	if !errors.Is(err, ErrDrift) || strings.Contains(msg, "\n") {
		t.Fatalf("CHECK with the egress via eth1 and the IP via eth0: %v, want one line of drift", err)
	}
	for _, s := range []string{ctrA4.Addr().String(), v4other.String(), "eth1", "eth0"} {
		if !strings.Contains(msg, s) {
			t.Errorf("CHECK's drift %q does not name %s", msg, s)
		}
	}
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.assigner().Check(attA); err != nil {
		t.Errorf("CHECK after GC moved the egress: %v", err)
	}
}

// An ADD that re-homes a routed IP (eth1 vanished, the IP's network now on
// eth0, the default route's) moves the other holder's uplink marks with
// its egress: its members leave eth1's chain, which goes with its routes,
// and CHECK of the other holder passes, without a GC.
func TestAnAddThatReHomesAnIPMovesTheOtherHoldersUplinkMarksToo(t *testing.T) {
	f, r := routedFixture(t)
	f.add(attA, onEth1V4)
	if len(r.members) == 0 {
		t.Fatalf("setup: a's ADD on eth1 marked nothing: %v", r.members)
	}
	f.k.dropUplink("eth1")
	viaEth0(f)
	f.steered(f.opts.NAT.(*fakeNAT), traffic.Both, ctrB4)
	f.add(attB, onEth1V4)
	if len(r.members)+len(r.marked)+len(r.routes) != 0 {
		t.Errorf("after the re-homing ADD: members %v, marked %v, routes %v; want a's marks gone with eth1's chain and routes", r.members, r.marked, r.routes)
	}
	if _, err := f.checkAs(attA, ctrA4); err != nil {
		t.Errorf("CHECK of a after b's ADD re-homed its IP: %v", err)
	}
}
