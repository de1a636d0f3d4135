package assigner

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/host"
	"github.com/external-ip/external-ip/pkg/traffic"
)

// A stray ingress rule of an IP a record still holds for egress alone
// takes with it only the flows it DNATed: the container's flows SNATed
// from the IP live on. An IP no record holds loses every flow.
func TestGCForgetsOnlyTheFlowsAStrayIngressRuleDNATedWhileTheIPIsHeld(t *testing.T) {
	f, n := newFixture(t), newFakeNAT()
	f.steered(n, traffic.Egress, ctrA4)
	f.add(attA, v4a)
	n.st.Ingress[v4a] = []netip.Addr{ctrB4.Addr(), ctrC4.Addr()} // a gone attachment's
	n.st.Ingress[v4b] = []netip.Addr{ctrB4.Addr()}               // held by no record
	if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
		t.Fatal(err)
	}
	if len(n.st.Ingress) != 0 {
		t.Errorf("GC left the stray ingress rules %v", n.st.Ingress)
	}
	want := []string{v4a.String() + "->" + ctrB4.Addr().String(), v4a.String() + "->" + ctrC4.Addr().String(), v4b.String() + "->invalid IP"}
	got := slices.Sorted(slices.Values(n.forgot))
	if !slices.Equal(got, want) {
		t.Errorf("GC forgot %v, want %v: the stray targets of held %s, every flow of unheld %s", got, want, v4a, v4b)
	}
	if len(n.stillSteered) != 0 {
		t.Errorf("GC forgot %v while the table still steered to them", n.stillSteered)
	}
}

// A rule of an IP on no device, that this state directory's index does
// not list, is another state directory's while another holder device
// exists (that holder is down, and its IPs lost their local routes): GC
// leaves it. With no other holder it is this directory's stray, as after
// a lost index, and goes.
func TestGCTakesARuleOfAnUnindexedIPOnNoDeviceForAnotherHoldersWhileOneExists(t *testing.T) {
	for _, other := range []bool{false, true} {
		f, n := newFixture(t), newFakeNAT()
		f.steered(n, traffic.Both, ctrA4)
		f.add(attA, v4a)
		if other {
			f.k.mu.Lock()
			f.k.host.addLink("eip1", "bridge", host.HolderMark+"state in /elsewhere", false)
			f.k.mu.Unlock()
		}
		n.st.Ingress[v4b] = []netip.Addr{ctrB4.Addr()}
		if err := f.assigner().GC("net1", []Attachment{attA}); err != nil {
			t.Fatal(err)
		}
		if _, kept := n.st.Ingress[v4b]; kept != other {
			t.Errorf("another holder device there: %v; GC kept the rule of %s, on no device and not indexed: %v", other, v4b, kept)
		}
		if forgot := slices.ContainsFunc(n.forgot, func(s string) bool { return strings.HasPrefix(s, v4b.String()) }); forgot == other {
			t.Errorf("another holder device there: %v; GC forgot the flows of %s: %v (%v)", other, v4b, forgot, n.forgot)
		}
	}
}
