package assigner

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/nat"
	"github.com/external-ip/external-ip/pkg/traffic"
)

func TestAddRefusesAnotherExternalIPForAContainerAddressThatAlreadyLeavesFromOne(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	f.add(attA, v4a)
	a := f.assigner()
	defer a.Close()
	_, err := a.Add(attB, []netip.Addr{v4b}, nil)
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("ADD of b from %s for a's container address: %v, want refused (CNI 7)", v4b, err)
	}
	for _, want := range []string{attA.String(), attB.String(), ctrA4.Addr().String(), v4a.String(), v4b.String()} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not name %s", err, want)
		}
	}
	k := nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth0"}
	if got := n.st.Egress[k]; got != v4a {
		t.Errorf("after the refused ADD a's egress is from %v, want %s untouched", got, v4a)
	}
	if _, err := f.checkAs(attA, ctrA4); err != nil {
		t.Errorf("CHECK of a after b's refused ADD: %v", err)
	}
}

func TestAddTakesAStrayEgressElementNoHolderOfItsIPHas(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Both, ctrA4)
	k := nat.EgressKey{Source: ctrA4.Addr(), Uplink: "eth0"}
	n.st.Egress[k] = v4b // left behind, no record has it
	f.add(attA, v4a)
	if got := n.st.Egress[k]; got != v4a {
		t.Errorf("egress of %s is from %v, want %s: the stray element should be taken", k.Source, got, v4a)
	}
}
