package claims

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/pools"
)

func TestAPoolRequestGetsOneFreeIPOfEachFamilyAndARepeatGetsTheSame(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("dual", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29", "2001:db8::/125"), NamespaceSelector: everyNamespace(), Hold: "route"}))
	n := startNode(t, api, "n1")
	resp := n.claimFor(t, p, "s1", "dual")
	if resp.Reason != "" || resp.Unavailable != "" || len(resp.Addresses) != 2 || !resp.Addresses[0].Is4() || !resp.Addresses[1].Is6() || resp.Hold != "route" {
		t.Fatalf("claim: %+v; want one IPv4 and one IPv6 address, hold route", resp)
	}
	all := claimsNow(t, api)
	for _, ip := range resp.Addresses {
		c := all[v1alpha1.ClaimName(ip)]
		if c == nil || c.Spec.Pool != "dual" || c.Spec.Owner.Pod == nil || c.Spec.Owner.Pod.UID != string(p.UID) ||
			len(c.Spec.Holders) != 1 || c.Spec.Holders[0].Node != "n1" || c.Labels[v1alpha1.LabelPool] != "dual" {
			t.Errorf("claim of %s: %+v", ip, c)
		}
	}
	waitFor(t, "the claims cached", func() bool { return n.given("dual", 0)+n.given("dual", 1) == 2 })
	again := n.claimFor(t, p, "s1", "dual")
	if addrsOf(again) != addrsOf(resp) {
		t.Errorf("a re-ADD got %s, the ADD %s", addrsOf(again), addrsOf(resp))
	}
	if got := len(claimsNow(t, api)); got != 2 {
		t.Errorf("%d claims after a re-ADD, want 2", got)
	}
	waitFor(t, "the pod annotated", func() bool {
		got, _ := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
		return got.Annotations[v1alpha1.AnnotationAssigned] == addrsOf(resp) && got.Labels[v1alpha1.LabelHolder] == "true"
	})
	waitFor(t, "an event saying so", func() bool {
		return slices.ContainsFunc(eventsOn(t, api, p), func(e string) bool { return strings.Contains(e, ReasonAssigned) })
	})
}

func TestTwoNodesRacingForEveryIPOfAPoolNeverGiveOneTwice(t *testing.T) {
	objs := objects(namespace("a", nil), node("n1", nil), node("n2", nil),
		pool("fifty", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("198.51.100.1-198.51.100.50"), NamespaceSelector: everyNamespace()}))
	var pods []*corev1.Pod
	for i := range 100 {
		p := pod("a", fmt.Sprintf("p%d", i), fmt.Sprintf("n%d", i%2+1))
		pods = append(pods, p)
		objs = append(objs, p)
	}
	api := claimstest.New(objs...)
	// The same seed: both nodes try the same IPs in the same order.
	n1 := startNode(t, api, "n1", func(c *Config) { c.Seed = 7 })
	n2 := startNode(t, api, "n2", func(c *Config) { c.Seed = 7 })
	results := make([]nodeapi.Response, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		n := map[string]*testNode{"n1": n1, "n2": n2}[p.Spec.NodeName]
		wg.Go(func() { results[i] = n.claimFor(t, p, "s", "fifty") })
	}
	wg.Wait()
	given := map[netip.Addr]string{}
	exhausted := 0
	for i, r := range results {
		switch {
		case r.Reason == nodeapi.ReasonPoolExhausted:
			exhausted++
		case r.Reason != "" || r.Unavailable != "" || len(r.Addresses) != 1:
			t.Errorf("pod %d: %+v", i, r)
		default:
			if other, ok := given[r.Addresses[0]]; ok {
				t.Errorf("%s given to %s and to %s", r.Addresses[0], other, pods[i].Name)
			}
			given[r.Addresses[0]] = pods[i].Name
		}
	}
	if len(given) != 50 || exhausted != 50 || len(claimsNow(t, api)) != 50 {
		t.Errorf("%d IPs given, %d refused as exhausted, %d claims; want 50, 50, 50", len(given), exhausted, len(claimsNow(t, api)))
	}
	if n1.rec.get(nodeapi.ReasonPoolExhausted)+n2.rec.get(nodeapi.ReasonPoolExhausted) != 50 {
		t.Errorf("the metrics counted %d and %d exhaustions", n1.rec.get(nodeapi.ReasonPoolExhausted), n2.rec.get(nodeapi.ReasonPoolExhausted))
	}
}

// An IP drawn from a pool is its owner's (the pod, or the StatefulSet's
// ordinal): another pod of the namespace naming it is refused, naming the
// IP, the pool and the owner, and gets no share of the owner's flows; the
// owner naming it again (another sandbox, the ordinal's next pod) joins
// it; a pod of another namespace is refused naming the namespace alone.
func TestAPoolsIPIsRefusedToAnyPodButItsOwnerThatNamesIt(t *testing.T) {
	set := statefulSet("team-a", "db", 1)
	web, db0, db0next := pod("team-a", "web", "n1"), setPod(set, 0, "n1", "1"), setPod(set, 0, "n1", "2")
	other, far := pod("team-a", "other", "n1"), pod("team-b", "far", "n1")
	api := claimstest.New(namespace("team-a", nil), namespace("team-b", nil), node("n1", nil), set, web, db0, other, far,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	for _, tc := range []struct {
		owner, next *corev1.Pod
		what        string
	}{
		{web, web, "pod team-a/web"},
		{db0, db0next, "StatefulSet team-a/db's ordinal 0"},
	} {
		drawn := n.claimFor(t, tc.owner, "s1", "p")
		if len(drawn.Addresses) != 1 {
			t.Fatalf("%s's pool ADD: %+v", tc.owner.Name, drawn)
		}
		ip := drawn.Addresses[0].String()
		r := n.claimFor(t, other, "s1", "", ip)
		want := ip + ": was drawn from pool p for " + tc.what + "; no other pod may hold it"
		if r.Reason != nodeapi.ReasonOwnedByAnotherPod || r.Message != want {
			t.Errorf("another pod of the namespace naming %s: %+v; want refused %s %q", ip, r, nodeapi.ReasonOwnedByAnotherPod, want)
		}
		if r := n.claimFor(t, far, "s1", "", ip); r.Reason != nodeapi.ReasonOwnedElsewhere || strings.Contains(r.Message, tc.owner.Name) {
			t.Errorf("a pod of another namespace naming %s: %+v; want refused %s, naming no pod", ip, r, nodeapi.ReasonOwnedElsewhere)
		}
		if c := claimsNow(t, api)[ip]; c == nil || len(c.Spec.Holders) != 1 || c.Spec.Holders[0].PodUID != string(tc.owner.UID) {
			t.Fatalf("claim of %s: %+v; want held by %s alone", ip, c, tc.owner.Name)
		}
		if tc.next != tc.owner {
			n.release(t, tc.owner, "s1")
			if err := api.Kube.CoreV1().Pods("team-a").Delete(context.Background(), tc.owner.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := api.Kube.CoreV1().Pods("team-a").Create(context.Background(), tc.next, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if r := n.claimFor(t, tc.next, "s2", "", ip); addrsOf(r) != ip {
			t.Errorf("the owner (%s) naming its own %s: %+v; want it", tc.next.Name, ip, r)
		}
	}
	waitFor(t, "the refusal's event on the other pod", func() bool {
		return slices.ContainsFunc(eventsOn(t, api, other), func(e string) bool { return strings.HasPrefix(e, "Warning OwnedByAnotherPod: ") })
	})
}

// A rollout in a small pool: the old pod's claim is deleted, and the new
// pod's ADD comes before the cache has seen the delete. The pool is full
// only in the cache: the ADD asks the server (one LIST of the pool's
// claims) and takes the IP freed; a pool full on the server too is
// refused as exhausted, after its one LIST.
func TestAPoolFullOnlyInTheCacheGivesTheIPTheServerHasFreed(t *testing.T) {
	old, other, next, last := pod("a", "old", "n1"), pod("a", "other", "n1"), pod("a", "next", "n1"), pod("a", "last", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), old, other, next, last,
		pool("tiny", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.1-192.0.2.2"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	freed, r := n.claimFor(t, old, "s1", "tiny"), n.claimFor(t, other, "s1", "tiny")
	if len(freed.Addresses) != 1 || len(r.Addresses) != 1 {
		t.Fatalf("the first two ADDs: %+v, %+v; want an IP each", freed, r)
	}
	waitFor(t, "both claims cached", func() bool { return n.given("tiny", pools.IPv4) == 2 })
	defer api.HideDeletes()()
	n.release(t, old, "s1")
	if n.cached(freed.Addresses[0]) == nil {
		t.Fatal("the cache saw the delete that the watch was to hide")
	}
	from := len(api.Ours.Actions())
	if r := n.claimFor(t, next, "s1", "tiny"); addrsOf(r) != freed.Addresses[0].String() {
		t.Fatalf("the new pod's ADD, the pool full only in the cache: %+v; want the freed %s", r, freed.Addresses[0])
	}
	r = n.claimFor(t, last, "s1", "tiny")
	want := "external-ip/pool: pool tiny has no free IPv4 address (2 of 2 claimed; kubectl get externalipclaims -l external-ip.io/pool=tiny)"
	if r.Reason != nodeapi.ReasonPoolExhausted || r.Message != want {
		t.Errorf("an ADD in a pool full on the server: %+v; want refused %s %q", r, nodeapi.ReasonPoolExhausted, want)
	}
	lists := 0
	for _, a := range api.Ours.Actions()[from:] {
		if l, ok := a.(k8stesting.ListAction); ok && a.GetResource().Resource == "externalipclaims" && !l.GetListRestrictions().Labels.Empty() {
			lists++
		}
	}
	if lists != 2 {
		t.Errorf("the two ADDs listed the pool's claims %d times; want once each", lists)
	}
}

func TestANamedIPIsSharedWithinItsNamespaceAndRefusedToAnotherNamingTheOwner(t *testing.T) {
	a1, a2, b := pod("team-a", "a1", "n1"), pod("team-a", "a2", "n1"), pod("team-b", "b", "n1")
	api := claimstest.New(namespace("team-a", nil), namespace("team-b", nil), node("n1", nil), a1, a2, b,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), Namespaces: []v1alpha1.NamespaceName{"team-a", "team-b"}}))
	n := startNode(t, api, "n1")
	for _, p := range []*corev1.Pod{a1, a2} {
		if r := n.claimFor(t, p, "s", "", "192.0.2.10"); addrsOf(r) != "192.0.2.10" {
			t.Fatalf("%s: %+v", p.Name, r)
		}
	}
	r := n.claimFor(t, b, "s", "", "192.0.2.10")
	if r.Reason != nodeapi.ReasonOwnedElsewhere || r.Message != "192.0.2.10: is owned by namespace team-a; a pod of namespace team-b may not hold it" {
		t.Errorf("team-b's pod: %+v", r)
	}
	if strings.Contains(r.Message, "a1") || strings.Contains(r.Message, "a2") {
		t.Errorf("the refusal names another tenant's pod: %q", r.Message)
	}
	c := claimsNow(t, api)["192.0.2.10"]
	if c == nil || c.Spec.Owner.Namespace != "team-a" || c.Spec.Owner.Pod != nil || len(c.Spec.Holders) != 2 {
		t.Fatalf("claim %+v; want team-a's, with a1 and a2 holding it", c)
	}
	waitFor(t, "the refusal's event on team-b's pod", func() bool {
		return slices.Contains(eventsOn(t, api, b), "Warning OwnedByAnotherNamespace: "+r.Message)
	})
	n.release(t, a1, "s")
	if c := claimsNow(t, api)["192.0.2.10"]; c == nil || len(c.Spec.Holders) != 1 || c.Spec.Holders[0].Pod != "a2" {
		t.Fatalf("after a1's release: %+v; want a2 still holding it", c)
	}
	n.release(t, a2, "s")
	if c := claimsNow(t, api)["192.0.2.10"]; c != nil {
		t.Errorf("after the last holder's release the claim is still there: %+v", c)
	}
}

func TestEachRefusalNamesWhatToChangeAndIsAnEventOnThePod(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", map[string]string{"tier": "db"}), node("n1", map[string]string{"zone": "x"}), p,
		pool("web-only", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/28"), NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}}),
		pool("edge", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.16/28"), NamespaceSelector: everyNamespace(),
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "edge"}}}),
		pool("reversed", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.40-192.0.2.33"), NamespaceSelector: everyNamespace()}),
		pool("tiny", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.64/32"), NamespaceSelector: everyNamespace()}))
	// The one IP of pool tiny, held by a pod that exists (the leader
	// would release it otherwise).
	holder := pod("z", "holder", "n9")
	api.Kube.CoreV1().Pods("z").Create(context.Background(), holder, metav1.CreateOptions{})
	taken := newClaim(netip.MustParseAddr("192.0.2.64"), "tiny", v1alpha1.ClaimOwner{Namespace: "z"},
		v1alpha1.ClaimHolder{Node: "n9", Pod: "holder", PodUID: string(holder.UID), Network: "pods", ContainerID: "c", IfName: "eth0"})
	if err := api.Tracker.Add(taken); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, api, "n1")
	for _, tc := range []struct {
		pool, addr, reason, msg string
	}{
		{"nope", "", nodeapi.ReasonUnknownPool, `external-ip/pool: no pool named "nope" (kubectl get externalippools)`},
		{"web-only", "", nodeapi.ReasonNamespaceNotAdmitted, "external-ip/pool: pool web-only does not admit namespace a"},
		{"edge", "", nodeapi.ReasonNodeNotAdmitted, "external-ip/pool: pool edge does not admit node n1 (its spec.nodeSelector): schedule the pod on a node it selects"},
		{"reversed", "", nodeapi.ReasonPoolNotReady, `external-ip/pool: pool reversed gives no IP: spec.ranges[0]: "192.0.2.40-192.0.2.33" has first after last`},
		{"tiny", "", nodeapi.ReasonPoolExhausted, "external-ip/pool: pool tiny has no free IPv4 address (1 of 1 claimed; kubectl get externalipclaims -l external-ip.io/pool=tiny)"},
		{"", "192.0.2.5", nodeapi.ReasonNamespaceNotAdmitted, "192.0.2.5: pool web-only does not admit namespace a"},
		{"", "203.0.113.5", nodeapi.ReasonNotInAnyPool, "203.0.113.5: lies in no pool (kubectl get externalippools): with pools defined, every external IP a pod names must lie in one that admits its namespace"},
	} {
		r := n.claimFor(t, p, "s", tc.pool, strings.Fields(tc.addr)...)
		if r.Reason != tc.reason || r.Message != tc.msg || len(r.Addresses) > 0 {
			t.Errorf("pool %q addresses %q: %+v\nwant %s: %s", tc.pool, tc.addr, r, tc.reason, tc.msg)
		}
		waitFor(t, "the event of "+tc.reason, func() bool { return slices.Contains(eventsOn(t, api, p), "Warning "+tc.reason+": "+tc.msg) })
		if n.rec.get(tc.reason) == 0 {
			t.Errorf("%s not counted", tc.reason)
		}
	}
	if got := len(claimsNow(t, api)); got != 1 {
		t.Errorf("%d claims after refusals only, want the 1 there was", got)
	}
}

func TestARefusedPartGivesBackWhatTheRequestHadTaken(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("dual", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29", "2001:db8::/125"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	r := n.claimFor(t, p, "s", "dual", "203.0.113.1")
	if r.Reason != nodeapi.ReasonNotInAnyPool {
		t.Fatalf("%+v", r)
	}
	if all := claimsNow(t, api); len(all) != 0 {
		t.Errorf("the pool's two IPs were kept though the request was refused: %v", all)
	}
}

func TestAStatefulSetPodGetsItsOrdinalsIPBackOnAnotherNode(t *testing.T) {
	set := statefulSet("a", "db", 3)
	first := setPod(set, 1, "n1", "first")
	api := claimstest.New(namespace("a", nil), node("n1", nil), node("n2", nil), set, first,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n1, n2 := startNode(t, api, "n1"), startNode(t, api, "n2")
	r := n1.claimFor(t, first, "s", "p")
	if len(r.Addresses) != 1 {
		t.Fatalf("%+v", r)
	}
	n1.release(t, first, "s")
	c := claimsNow(t, api)[v1alpha1.ClaimName(r.Addresses[0])]
	if c == nil || c.Spec.Owner.StatefulSet == nil || c.Spec.Owner.StatefulSet.Ordinal != 1 || len(c.Spec.Holders) != 0 {
		t.Fatalf("after the pod's DEL: %+v; want the claim kept for ordinal 1, with no holder", c)
	}
	// The pod is deleted and made again, with a new UID, on another node.
	api.Kube.CoreV1().Pods("a").Delete(context.Background(), first.Name, metav1.DeleteOptions{})
	second := setPod(set, 1, "n2", "second")
	api.Kube.CoreV1().Pods("a").Create(context.Background(), second, metav1.CreateOptions{})
	waitFor(t, "n2 to see the claim", func() bool { return n2.cached(r.Addresses[0]) != nil })
	if again := n2.claimFor(t, second, "s", "p"); addrsOf(again) != addrsOf(r) {
		t.Errorf("the next pod of ordinal 1 got %s (%+v), the first had %s", addrsOf(again), again, addrsOf(r))
	}
	other := setPod(set, 2, "n2", "first")
	api.Kube.CoreV1().Pods("a").Create(context.Background(), other, metav1.CreateOptions{})
	if r2 := n2.claimFor(t, other, "s", "p"); len(r2.Addresses) != 1 || r2.Addresses[0] == r.Addresses[0] {
		t.Errorf("ordinal 2 got %s; want an IP of its own", addrsOf(r2))
	}
}

func TestWithoutTheRuntimesPodIdentityNothingIsClaimed(t *testing.T) {
	api := claimstest.New(pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	r := n.Handle(context.Background(), nodeapi.Request{Op: nodeapi.OpClaim, Pool: "p"})
	if r.Reason != nodeapi.ReasonNoPodIdentity || !strings.Contains(r.Message, "K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID") {
		t.Errorf("%+v", r)
	}
	gone := pod("a", "gone", "n1")
	api.Kube.CoreV1().Namespaces().Create(context.Background(), namespace("a", nil), metav1.CreateOptions{})
	if r := n.claimFor(t, gone, "s", "p"); r.Reason != nodeapi.ReasonNoPodIdentity || !strings.Contains(r.Message, "not in the cluster") {
		t.Errorf("a pod the API server does not have: %+v", r)
	}
	if len(claimsNow(t, api)) != 0 {
		t.Error("claims were made")
	}
}

// The node publishes to the plugin every pool's name and, for a pool whose
// spec.hold says how its IPs are held, that hold and its families: the
// plugin's STATUS checks that the LAN can reach IPs held so.
func TestThePublishedPoolsSayTheHoldAndFamiliesOfEachPoolThatHasOne(t *testing.T) {
	api := claimstest.New(node("n1", nil),
		pool("edge", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace(), Hold: "route"}),
		pool("plain", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.8/29", "2001:db8::/125"), NamespaceSelector: everyNamespace()}),
		pool("v6", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("2001:db8:1::/125"), NamespaceSelector: everyNamespace(), Hold: "address"}))
	n := startNode(t, api, "n1")
	want := []nodeapi.HeldPool{{Name: "edge", Hold: "route", IPv4: true}, {Name: "v6", Hold: "address", IPv6: true}}
	var got nodeapi.Pools
	waitFor(t, "the pools published", func() bool {
		got, _, _ = nodeapi.Published(n.dir)
		return len(got.Names) == 3
	})
	if !slices.Equal(got.Held, want) {
		t.Errorf("published %+v, want the held pools %+v", got, want)
	}
}

// A pool's hold is published only where its nodeSelector admits the node,
// and follows the node's labels: the plugin's STATUS must not fail on
// every node for a pool held otherwise on a few.
func TestThePublishedHoldsFollowTheNodesLabels(t *testing.T) {
	edge := &metav1.LabelSelector{MatchLabels: map[string]string{"edge": "true"}}
	api := claimstest.New(node("n1", nil),
		pool("edge", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace(), Hold: "route", NodeSelector: edge}),
		pool("all", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("2001:db8::/125"), NamespaceSelector: everyNamespace(), Hold: "address"}))
	n := startNode(t, api, "n1")
	held := func(want ...string) func() bool {
		return func() bool {
			got, _, _ := nodeapi.Published(n.dir)
			var names []string
			for _, h := range got.Held {
				names = append(names, h.Name)
			}
			return len(got.Names) == 2 && slices.Equal(names, want)
		}
	}
	waitFor(t, "only pool all's hold, on a node pool edge leaves out", held("all"))
	label := func(labels map[string]string) {
		t.Helper()
		no, err := api.Kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		no.Labels = labels
		if _, err := api.Kube.CoreV1().Nodes().Update(context.Background(), no, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(map[string]string{"edge": "true"})
	waitFor(t, "both holds once the node is labelled edge", held("all", "edge"))
	label(nil)
	waitFor(t, "pool edge's hold gone with the label", held("all"))
}
