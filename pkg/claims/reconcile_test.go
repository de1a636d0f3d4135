package claims

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

func TestMain(m *testing.M) {
	claimstest.MuteKlog()
	os.Exit(m.Run())
}

func fast(c *Config) { c.SweepEvery, c.LocalEvery = 50*time.Millisecond, 50*time.Millisecond }

func TestAHolderWhoseAttachmentTheNodeDoesNotHaveIsDroppedAndADeferredReleaseCarriedOut(t *testing.T) {
	a, b := pod("a", "a", "n1"), pod("a", "b", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), a, b,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1", fast)
	ra, rb := n.claimFor(t, a, "s", "p"), n.claimFor(t, b, "s", "p")
	// a's reply was lost: the plugin failed the ADD and its DEL forgot the
	// intent. b's DEL could not reach the node process and deferred it.
	nodeapi.Forget(n.dir, attachment(a, "s"))
	nodeapi.Defer(n.dir, attachment(b, "s"))
	waitFor(t, "both claims released", func() bool {
		all := claimsNow(t, api)
		return all[v1alpha1.ClaimName(ra.Addresses[0])] == nil && all[v1alpha1.ClaimName(rb.Addresses[0])] == nil
	})
	waitFor(t, "the deferred release removed", func() bool { d, _ := nodeapi.Deferred(n.dir); return len(d) == 0 })
}

func TestTwoNodesJoiningOneNamedIPAtOnceBothHoldIt(t *testing.T) {
	var objs []*corev1.Pod
	api := claimstest.New(namespace("a", nil), node("n1", nil), node("n2", nil),
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	for i := range 20 {
		p := pod("a", fmt.Sprintf("p%d", i), fmt.Sprintf("n%d", i%2+1))
		api.Kube.CoreV1().Pods("a").Create(context.Background(), p, metav1.CreateOptions{})
		objs = append(objs, p)
	}
	nodes := map[string]*testNode{"n1": startNode(t, api, "n1"), "n2": startNode(t, api, "n2")}
	var wg sync.WaitGroup
	for _, p := range objs {
		wg.Go(func() {
			if r := nodes[p.Spec.NodeName].claimFor(t, p, "s", "", "192.0.2.77"); addrsOf(r) != "192.0.2.77" {
				t.Errorf("%s: %+v", p.Name, r)
			}
		})
	}
	wg.Wait()
	if c := claimsNow(t, api)["192.0.2.77"]; c == nil || len(c.Spec.Holders) != 20 {
		t.Fatalf("the claim: %+v; want 20 holders (an update lost to a conflict was not tried again)", c)
	}
	for _, p := range objs {
		wg.Go(func() {
			n := nodes[p.Spec.NodeName]
			a := attachment(p, "s")
			if r := n.Handle(context.Background(), nodeapi.Request{Op: nodeapi.OpRelease, Attachment: a}); r.Unavailable != "" || r.Reason != "" {
				t.Errorf("release of %s: %+v", p.Name, r)
			}
		})
	}
	wg.Wait()
	if c := claimsNow(t, api)["192.0.2.77"]; c != nil {
		t.Errorf("after every release: %+v", c)
	}
}

// The e2e recipe makes 1,000 cycles against a real API server
// (test/e2e/claims.sh); here 200, in four racing workers.
func TestClaimAndReleaseCyclesLeaveNoClaim(t *testing.T) {
	api := claimstest.New(namespace("a", nil), node("n1", nil),
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/28", "2001:db8::/124"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				p := pod("a", fmt.Sprintf("w%d-%d", w, i), "n1")
				api.Kube.CoreV1().Pods("a").Create(context.Background(), p, metav1.CreateOptions{})
				if r := n.claimFor(t, p, "s", "p"); len(r.Addresses) != 2 && r.Reason != nodeapi.ReasonPoolExhausted {
					t.Errorf("%s: %+v", p.Name, r)
				}
				n.release(t, p, "s")
				api.Kube.CoreV1().Pods("a").Delete(context.Background(), p.Name, metav1.DeleteOptions{})
			}
		})
	}
	wg.Wait()
	if all := claimsNow(t, api); len(all) != 0 {
		t.Errorf("%d claims left after 200 cycles: %v", len(all), all)
	}
}

func TestAClaimForAnAttachmentWhoseReleaseWasDeferredReleasesFirstAndKeepsTheNewClaim(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	if r := n.claimFor(t, p, "s", "p"); len(r.Addresses) != 1 {
		t.Fatalf("%+v", r)
	}
	// The DEL could not reach the node process; the runtime reuses the
	// container ID for its next ADD.
	if err := nodeapi.Defer(n.dir, attachment(p, "s")); err != nil {
		t.Fatal(err)
	}
	second := n.claimFor(t, p, "s", "p", "192.0.2.200")
	if len(second.Addresses) != 2 {
		t.Fatalf("the second ADD got %+v", second)
	}
	if d, _ := nodeapi.Deferred(n.dir); len(d) != 0 {
		t.Errorf("the deferred release is still there: %v", d)
	}
	n.carryOutDeferred(context.Background())
	all := claimsNow(t, api)
	for _, ip := range second.Addresses {
		if c := all[v1alpha1.ClaimName(ip)]; c == nil || len(c.Spec.Holders) != 1 {
			t.Errorf("claim of %s after the deferred releases ran: %+v; the second ADD's claims must stay", ip, c)
		}
	}
	if len(all) != 2 {
		t.Errorf("%d claims; want the second ADD's 2 only (the first's released by its DEL)", len(all))
	}
}
