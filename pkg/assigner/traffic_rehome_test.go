package assigner

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
)

var ctrC4 = netip.MustParsePrefix("10.88.0.7/24")

// twoHoldersOnEth1 is a fixture whose a (ctrA4) and b (ctrB4) both hold
// v4other through eth1, which then vanishes, v4other's route moving to eth0.
func twoHoldersOnEth1(t *testing.T) (*fixture, *fakeNAT) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, TrafficBoth, ctrA4)
	f.add(attA, v4other)
	f.steered(n, TrafficBoth, ctrB4)
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
	f.steered(n, TrafficBoth, ctrC4)
	f.add(attC, v4other)
	want := map[nat.EgressKey]netip.Addr{}
	for _, c := range []netip.Prefix{ctrA4, ctrB4, ctrC4} {
		want[nat.EgressKey{Source: c.Addr(), Uplink: "eth0"}] = v4other
	}
	if fmt.Sprint(n.st.Egress) != fmt.Sprint(want) {
		t.Errorf("after the re-homing ADD egress is %v, want %v", n.st.Egress, want)
	}
	d := readDisk(t, f.stateDir())
	for _, att := range []Attachment{attA, attB} {
		eg := d.records[att.key()].Steering.egressOf()
		if len(eg) != 1 || eg[0].Uplink != "eth0" {
			t.Errorf("%s's record keeps egress %+v, want one rule via eth0", att, eg)
		}
		if _, err := f.assigner().Check(att); err != nil {
			t.Errorf("CHECK of %s after the re-homing ADD: %v", att, err)
		}
	}
}
