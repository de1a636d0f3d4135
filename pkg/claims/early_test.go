package claims

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// asking is pod ns/name on nodeName with the pool annotation.
func asking(ns, name, nodeName, poolName string) *corev1.Pod {
	p := pod(ns, name, nodeName)
	p.Annotations = map[string]string{"external-ip/pool": poolName}
	return p
}

// ownersClaims are the server's claims of p's pod as owner.
func ownersClaims(t *testing.T, api *claimstest.API, p *corev1.Pod) []*v1alpha1.ExternalIPClaim {
	t.Helper()
	var out []*v1alpha1.ExternalIPClaim
	for _, c := range claimsNow(t, api) {
		if c.Spec.Owner.Pod != nil && c.Spec.Owner.Pod.UID == string(p.UID) {
			out = append(out, c)
		}
	}
	return out
}

// claimUnfilled asks as the plugin does, and returns the answer and the
// fill that the socket runs once the plugin has exited.
func (n *testNode) claimUnfilled(t *testing.T, p *corev1.Pod, sandbox, pool string) (nodeapi.Response, func()) {
	t.Helper()
	req := nodeapi.Request{Op: nodeapi.OpClaim, Attachment: attachment(p, sandbox), Pool: pool,
		Pod: nodeapi.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}}
	if err := nodeapi.MarkIntent(n.dir, nodeapi.Marker{Attachment: req.Attachment, Pod: req.Pod}); err != nil {
		t.Fatal(err)
	}
	return n.claim(socketContext(t), req)
}

func TestAPodScheduledHereIsClaimedBeforeItsADDWhichAnswersBeforeAnyWrite(t *testing.T) {
	p := asking("a", "web", "n1", "dual")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("dual", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29", "2001:db8::/125"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	waitFor(t, "the pod's two claims, made before any ADD", func() bool { return len(ownersClaims(t, api, p)) == 2 })
	early := map[string]bool{}
	for _, c := range ownersClaims(t, api, p) {
		if len(c.Spec.Holders) != 1 || !isPending(c.Spec.Holders[0]) || c.Spec.Holders[0].Node != "n1" || c.Spec.Holders[0].PodUID != string(p.UID) || c.Spec.ActiveNode != "n1" {
			t.Fatalf("early claim %s: %+v; want one pending holder on n1 for the pod", c.Name, c.Spec)
		}
		early[c.Spec.Address] = true
	}
	kube, ours := len(api.Kube.Actions()), len(api.Ours.Actions())
	resp, fill := n.claimUnfilled(t, p, "s1", "dual")
	// What the ADD asked the API server of claims, and wrote of pods (the
	// leader's first sweep reads pods, and writes pool status and its
	// ConfigMap, beside it; the informers list and watch).
	var asked []string
	for _, a := range append(api.Kube.Actions()[kube:], api.Ours.Actions()[ours:]...) {
		r := a.GetResource().Resource
		if v := a.GetVerb(); (v != "list" && v != "watch" && v != "get" && r == "pods") || (v != "list" && v != "watch" && r == "externalipclaims") {
			asked = append(asked, v+" "+r)
		}
	}
	if len(resp.Addresses) != 2 || !early[resp.Addresses[0].String()] || !early[resp.Addresses[1].String()] {
		t.Fatalf("the ADD got %+v; want the early claims' %v", resp, early)
	}
	if len(asked) != 0 {
		t.Errorf("before its answer the ADD asked the API server %v; want nothing", asked)
	}
	fill()
	for _, c := range ownersClaims(t, api, p) {
		if len(c.Spec.Holders) != 1 || c.Spec.Holders[0] != n.holderOf(p, "s1") {
			t.Errorf("claim %s after the ADD: holders %+v; want the attachment's", c.Name, c.Spec.Holders)
		}
	}
	n.release(t, p, "s1")
	if got := len(ownersClaims(t, api, p)); got != 0 {
		t.Errorf("%d claims after the DEL; want 0", got)
	}
}

func (n *testNode) holderOf(p *corev1.Pod, sandbox string) v1alpha1.ClaimHolder {
	a := attachment(p, sandbox)
	return v1alpha1.ClaimHolder{Node: n.cfg.NodeName, Pod: p.Name, PodUID: string(p.UID), Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName}
}

func TestNoEarlyClaimForAPodOnTheHostsNetworkOnItsWayOutOrOfAnotherNode(t *testing.T) {
	host, going, elsewhere := asking("a", "host", "n1", "v4"), asking("a", "going", "n1", "v4"), asking("a", "far", "n2", "v4")
	host.Spec.HostNetwork = true
	going.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	later := asking("a", "later", "n1", "v4")
	api := claimstest.New(namespace("a", nil), node("n1", nil), host, going, elsewhere, later,
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	startNode(t, api, "n1")
	// later is claimed; the queue is one, so the others were seen first.
	waitFor(t, "the claim of a pod that wants one", func() bool { return len(ownersClaims(t, api, later)) == 1 })
	for _, p := range []*corev1.Pod{host, going, elsewhere} {
		if got := len(ownersClaims(t, api, p)); got != 0 {
			t.Errorf("pod %s: %d early claims; want none", p.Name, got)
		}
	}
}

func TestAPendingHolderGoesWithItsPodAndTakesTheAttachmentOfAnADDWhoseFillWasLost(t *testing.T) {
	gone, crashed := asking("a", "gone", "n1", "v4"), asking("a", "crashed", "n1", "v4")
	api := claimstest.New(namespace("a", nil), node("n1", nil), gone, crashed,
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	first := startNode(t, api, "n1")
	waitFor(t, "both early claims", func() bool {
		return len(ownersClaims(t, api, gone)) == 1 && len(ownersClaims(t, api, crashed)) == 1
	})
	// crashed's ADD is answered, and the process stops before its fill.
	if resp, _ := first.claimUnfilled(t, crashed, "s1", "v4"); len(resp.Addresses) != 1 {
		t.Fatalf("claim: %+v", resp)
	}
	first.stop()
	// gone is deleted before its ADD ever came.
	if err := api.Kube.CoreV1().Pods("a").Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := startNode(t, api, "n1", fast, func(c *Config) { c.DataDir = first.dir })
	waitFor(t, "gone's claim released", func() bool { return len(ownersClaims(t, api, gone)) == 0 })
	waitFor(t, "crashed's holder filled with its attachment", func() bool {
		cs := ownersClaims(t, api, crashed)
		return len(cs) == 1 && len(cs[0].Spec.Holders) == 1 && cs[0].Spec.Holders[0] == next.holderOf(crashed, "s1")
	})
}

// A node process that stops while an ADD's fill is still to come (the
// plugin not yet exited) is not held up by its local loop, which found
// that attachment's holder pending and waits for its lock.
func TestANodeStopsWhileAnADDsFillIsStillToCome(t *testing.T) {
	p := asking("a", "web", "n1", "v4")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1", fast)
	waitFor(t, "the early claim", func() bool { return len(ownersClaims(t, api, p)) == 1 })
	if resp, _ := n.claimUnfilled(t, p, "s1", "v4"); len(resp.Addresses) != 1 {
		t.Fatalf("claim: %+v", resp)
	}
	time.Sleep(300 * time.Millisecond) // the local loop (every 50 ms) reaches the attachment
	stopped := make(chan struct{})
	go func() { n.stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the node did not stop within 5s while an ADD's fill was still to come")
	}
}

// An ADD that comes while the pod's early claim is under way waits for it:
// the pod never gets two IPs of a family.
func TestAnADDRacingItsPodsEarlyClaimNeverMakesASecond(t *testing.T) {
	api := claimstest.New(namespace("a", nil), node("n1", nil),
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/26"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	for i := range 20 {
		p := asking("a", "web-"+string(rune('a'+i)), "n1", "v4")
		if _, err := api.Kube.CoreV1().Pods("a").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the pod cached", func() bool { _, err := n.local.Core().V1().Pods().Lister().Pods("a").Get(p.Name); return err == nil })
		resp := n.claimFor(t, p, "s1", "v4")
		cs := ownersClaims(t, api, p)
		if len(resp.Addresses) != 1 || len(cs) != 1 || cs[0].Spec.Address != resp.Addresses[0].String() {
			t.Fatalf("pod %s: the ADD got %+v, the pod owns %d claims; want one, the ADD's", p.Name, resp, len(cs))
		}
	}
}

// An ADD refused for another of its IPs leaves the pod's early claim as it
// was, pending, for the pod's next ADD.
func TestARefusedADDLeavesItsPodsEarlyClaimPending(t *testing.T) {
	p := asking("a", "web", "n1", "v4")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	waitFor(t, "the early claim", func() bool { return len(ownersClaims(t, api, p)) == 1 })
	if resp := n.claimFor(t, p, "s1", "v4", "198.51.100.7"); resp.Reason != nodeapi.ReasonNotInAnyPool {
		t.Fatalf("an ADD naming an IP in no pool: %+v; want refused %s", resp, nodeapi.ReasonNotInAnyPool)
	}
	cs := ownersClaims(t, api, p)
	if len(cs) != 1 || len(cs[0].Spec.Holders) != 1 || !isPending(cs[0].Spec.Holders[0]) {
		t.Fatalf("after the refused ADD the pod's claims are %+v; want its early claim, still pending", cs)
	}
}

// A pod whose annotation names another pool before its ADD gets that
// pool's claim, and the first pool's goes.
func TestAPodThatAsksAnotherPoolBeforeItsADDKeepsOnlyThatPoolsClaim(t *testing.T) {
	p := asking("a", "web", "n1", "a")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("a", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}),
		pool("b", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("198.51.100.0/29"), NamespaceSelector: everyNamespace()}))
	startNode(t, api, "n1", fast)
	waitFor(t, "pool a's early claim", func() bool { return len(ownersClaims(t, api, p)) == 1 })
	got, err := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Annotations["external-ip/pool"] = " b "
	if _, err := api.Kube.CoreV1().Pods("a").Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "only pool b's claim", func() bool {
		cs := ownersClaims(t, api, p)
		return len(cs) == 1 && cs[0].Spec.Pool == "b"
	})
}

// The pod's early claims are made, but the informer has not seen their
// creates when the pod's ADD comes: the ADD adopts them (kept as made
// here until the cache shows them), never a second IP of a family; a
// StatefulSet's pod, whose claims are its ordinal's, alike.
func TestAnADDBeforeTheCacheShowsItsPodsEarlyClaimsAdoptsThem(t *testing.T) {
	set := statefulSet("a", "db", 1)
	for _, p := range []*corev1.Pod{asking("a", "web", "n1", "dual"), setPod(set, 0, "n1", "1")} {
		t.Run(p.Name, func(t *testing.T) {
			p.Annotations = map[string]string{"external-ip/pool": "dual"}
			api := claimstest.New(namespace("a", nil), node("n1", nil), set,
				pool("dual", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29", "2001:db8::/125"), NamespaceSelector: everyNamespace()}))
			n := startNode(t, api, "n1")
			api.HideNextCreate()
			defer api.HideNextCreate()()
			if _, err := api.Kube.CoreV1().Pods("a").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the two early claims on the server", func() bool { return len(claimsNow(t, api)) == 2 })
			early := map[string]bool{}
			for _, c := range claimsNow(t, api) {
				if n.cached(netip.MustParseAddr(c.Spec.Address)) != nil {
					t.Fatalf("the cache shows early claim %s, whose create the watch was to hide", c.Name)
				}
				early[c.Spec.Address] = true
			}
			resp := n.claimFor(t, p, "s1", "dual")
			if got := claimsNow(t, api); len(resp.Addresses) != 2 || !early[resp.Addresses[0].String()] || !early[resp.Addresses[1].String()] || len(got) != 2 {
				t.Fatalf("the ADD got %+v and the server has %d claims; want the early claims' %v, and no other claim", resp, len(got), early)
			}
		})
	}
}
