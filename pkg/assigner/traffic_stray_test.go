package assigner

import (
	"net/netip"
	"slices"
	"testing"

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
