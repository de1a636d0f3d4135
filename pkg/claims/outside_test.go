package claims

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/pools"
)

// A pool whose ranges are edited to shrink keeps the claims it gave
// outside them until their holders go (the leader's), but they are not
// its any more: its numbers count only the claims inside its ranges, a
// request finds it exhausted only when those fill it, and a StatefulSet's
// ordinal whose claim nobody holds gets an IP of the ranges. No leader
// here: what is seen is the node's alone.
func TestAPoolShrunkCountsAndGivesOnlyTheIPsInsideItsRanges(t *testing.T) {
	set := statefulSet("a", "db", 1)
	a, b, c := pod("a", "a", "n1"), pod("a", "b", "n1"), pod("a", "c", "n1")
	first, next := setPod(set, 0, "n1", "x"), setPod(set, 0, "n1", "y")
	api := claimstest.New(namespace("a", nil), node("n1", nil), set, a, b, c, first, leaseHeldElsewhere(),
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	ipA, ipB := n.claimFor(t, a, "s", "p").Addresses[0], n.claimFor(t, b, "s", "p").Addresses[0]
	ipS := n.claimFor(t, first, "s", "p").Addresses[0]
	n.release(t, first, "s") // the ordinal's claim stays, nobody holding it
	if err := api.Kube.CoreV1().Pods("a").Delete(context.Background(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Kube.CoreV1().Pods("a").Create(context.Background(), next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claims cached", func() bool { return len(claimsNow(t, api)) == 3 })

	api.SetRanges(t, "p", ipA.String()+"/32", "198.51.100.0/30") // gives ipA, .1 and .2
	waitFor(t, "the shrunk ranges read", func() bool { return n.PoolCounts()[0].Size == 3 })
	if got, want := n.PoolCounts()[0], (pools.Count{Pool: "p", Size: 3, Used: 1}); got != want || got.Free() != 2 {
		t.Errorf("counts %+v (free %d), want %+v (free 2): claims of %s and %s outside the ranges counted", got, got.Free(), want, ipB, ipS)
	}
	given := map[string]netip.Addr{}
	for _, p := range []struct {
		name string
		r    func() []netip.Addr
	}{{"c", func() []netip.Addr { return n.claimFor(t, c, "s", "p").Addresses }}, {"ordinal 0", func() []netip.Addr { return n.claimFor(t, next, "s", "p").Addresses }}} {
		got := p.r()
		if len(got) != 1 || !slices.Contains([]string{"198.51.100.1", "198.51.100.2"}, got[0].String()) {
			t.Fatalf("%s got %v; want one of the free IPs of the ranges, 198.51.100.1 or .2", p.name, got)
		}
		given[p.name] = got[0]
	}
	if given["c"] == given["ordinal 0"] {
		t.Errorf("c and ordinal 0 both got %s", given["c"])
	}
	waitFor(t, "used 3, free 0 once the ranges are full", func() bool { got := n.PoolCounts()[0]; return got.Used == 3 && got.Free() == 0 })
}
