package claims

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/pools"
)

// These tests are about one IP and its owner: an attachment is written
// into its owner's claim, never into a claim of the same name made since
// for another owner, and a pod has one IP of a family from a pool.

// othersClaim is the claim of ip that another node made for pod q of
// namespace b, which exists (the leader would release the claim else).
func othersClaim(t *testing.T, api *claimstest.API, ip netip.Addr, poolName string) *v1alpha1.ExternalIPClaim {
	t.Helper()
	q := pod("b", "q", "n2")
	if _, err := api.Kube.CoreV1().Pods("b").Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return newClaim(ip, poolName, v1alpha1.ClaimOwner{Namespace: "b", Pod: &v1alpha1.PodRef{Name: "q", UID: string(q.UID)}},
		v1alpha1.ClaimHolder{Node: "n2", Pod: "q", PodUID: string(q.UID), Network: "pods", ContainerID: "q-s1", IfName: "eth0"})
}

// onlyOthers fails unless the claim of ip is b/q's and held by b/q alone.
func onlyOthers(t *testing.T, api *claimstest.API, ip netip.Addr) {
	t.Helper()
	c := claimsNow(t, api)[v1alpha1.ClaimName(ip)]
	if c == nil || c.Spec.Owner.Namespace != "b" || len(c.Spec.Holders) != 1 || c.Spec.Holders[0].Pod != "q" {
		t.Fatalf("claim of %s: %+v; want b/q's, held by b/q alone (another namespace's attachment joined it)", ip, c)
	}
}

// cachedClaim waits for the cache to show ip's claim, and returns it with
// its pending holder.
func (n *testNode) cachedClaim(t *testing.T, ip string) (*v1alpha1.ExternalIPClaim, v1alpha1.ClaimHolder) {
	t.Helper()
	var c *v1alpha1.ExternalIPClaim
	waitFor(t, "the early claim cached", func() bool { c = n.cached(netip.MustParseAddr(ip)); return c != nil })
	return c.DeepCopy(), c.Spec.Holders[0]
}

// adopted is pod a/web's early claim on node n1 (with namespace b and node
// n2 for another node's pod), as the cache had it, with its pending
// holder, once the pod's ADD has adopted it: answered, its fill not run.
type adopted struct {
	p    *corev1.Pod
	api  *claimstest.API
	n    *testNode
	c    *v1alpha1.ExternalIPClaim
	h    v1alpha1.ClaimHolder
	ip   netip.Addr
	fill func()
}

func adoptEarly(t *testing.T) adopted {
	t.Helper()
	p := asking("a", "web", "n1", "v4")
	api := claimstest.New(namespace("a", nil), namespace("b", nil), node("n1", nil), node("n2", nil), p,
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	waitFor(t, "the early claim", func() bool { return len(ownersClaims(t, api, p)) == 1 })
	c, h := n.cachedClaim(t, ownersClaims(t, api, p)[0].Spec.Address)
	resp, fill := n.claimUnfilled(t, p, "s1", "v4")
	if len(resp.Addresses) != 1 || resp.Addresses[0].String() != c.Spec.Address {
		t.Fatalf("the ADD got %+v; want the early claim's %s", resp, c.Spec.Address)
	}
	return adopted{p: p, api: api, n: n, c: c, h: h, ip: resp.Addresses[0], fill: fill}
}

// A node's settle read the intents before the pod's ADD wrote its own; the
// ADD adopted the early claim; the pod is then on its way out. Settle must
// not take the claim away from under the ADD: another node would give the
// IP to another pod, and the ADD's fill would join that pod's claim.
func TestSettleLeavesAPendingHolderWhosePodsADDCameAfterItReadTheIntents(t *testing.T) {
	x := adoptEarly(t)
	going, _ := x.api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
	going.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	if _, err := x.api.Kube.CoreV1().Pods("a").Update(context.Background(), going, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod seen going", func() bool {
		got, err := x.n.local.Core().V1().Pods().Lister().Pods("a").Get("web")
		return err == nil && got.DeletionTimestamp != nil
	})
	x.n.early.settleOne(context.Background(), x.c, x.h, nil)                                                    // as settle, with the intents it read first
	_, _ = x.api.Claims.Create(context.Background(), othersClaim(t, x.api, x.ip, "v4"), metav1.CreateOptions{}) // another node, if it is free
	x.fill()
	got := claimsNow(t, x.api)[v1alpha1.ClaimName(x.ip)]
	if got == nil || got.Spec.Owner.Namespace != "a" || len(got.Spec.Holders) != 1 || got.Spec.Holders[0] != x.n.holderOf(x.p, "s1") {
		t.Fatalf("claim of %s after the ADD: %+v; want a/web's, held by its attachment alone", x.ip, got)
	}
}

// The claim an ADD adopted is deleted and made again for another owner
// between the ADD's answer and its fill, while the cache still has the
// first: the fill leaves the other's claim alone and says the IP is lost.
func TestAFillNeverWritesIntoAClaimMadeAgainForAnotherOwner(t *testing.T) {
	x := adoptEarly(t)
	x.api.RemakeBefore("update", othersClaim(t, x.api, x.ip, "v4"))
	x.fill()
	onlyOthers(t, x.api, x.ip)
	if got := x.n.rec.get(reasonEarlyClaimLost); got != 1 {
		t.Errorf("%d lost claims counted; want 1", got)
	}
	waitFor(t, "the event of the lost claim", func() bool {
		return slices.ContainsFunc(eventsOn(t, x.api, x.p), func(e string) bool { return strings.Contains(e, reasonEarlyClaimLost) })
	})
}

// An ADD finds its owner's claim in the cache (its pod's earlier
// attachment's), but the claim was deleted and made again for another
// owner since: the join's retry reads the other's claim, and must not join
// it. The ADD takes another IP, or is refused as exhausted.
func TestAnADDWhoseOwnersClaimWasMadeAgainForAnotherOwnerTakesAnotherIP(t *testing.T) {
	for _, tc := range []struct {
		ranges, reason string
	}{
		{"192.0.2.0/30", ""},
		{"192.0.2.0/32", nodeapi.ReasonPoolExhausted},
	} {
		t.Run(tc.ranges, func(t *testing.T) {
			p := pod("a", "web", "n1")
			api := claimstest.New(namespace("a", nil), namespace("b", nil), node("n1", nil), node("n2", nil), p,
				pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges(tc.ranges), NamespaceSelector: everyNamespace()}))
			n := startNode(t, api, "n1")
			first := n.claimFor(t, p, "s1", "v4")
			if len(first.Addresses) != 1 {
				t.Fatalf("first ADD: %+v", first)
			}
			ip := first.Addresses[0]
			waitFor(t, "the claim cached", func() bool { return n.cached(ip) != nil })
			api.RemakeBefore("update", othersClaim(t, api, ip, "v4"))
			second := n.claimFor(t, p, "s2", "v4")
			onlyOthers(t, api, ip)
			if second.Reason != tc.reason || (tc.reason == "" && (len(second.Addresses) != 1 || second.Addresses[0] == ip)) {
				t.Fatalf("the second ADD got %+v; want another IP than %s, or refused %q", second, ip, tc.reason)
			}
			if tc.reason == "" {
				c := claimsNow(t, api)[v1alpha1.ClaimName(second.Addresses[0])]
				if c == nil || ownerKey(c.Spec.Owner) != "pod/a/"+string(p.UID) || len(c.Spec.Holders) != 1 {
					t.Errorf("claim of the second ADD's IP: %+v; want a/web's, held by its attachment", c)
				}
			}
		})
	}
}

// The early claim's create commits, but its answer is lost (a timeout) and
// the cache does not show it yet when the early worker tries again: the
// worker asks the server for it, and the pod has one claim, not two.
func TestAnEarlyClaimWhoseCreateLostItsAnswerIsFoundNotMadeTwice(t *testing.T) {
	api := claimstest.New(namespace("a", nil), node("n1", nil),
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	echo := api.LoseNextCreate()
	from := len(api.Ours.Actions())
	p := asking("a", "web", "n1", "v4")
	if _, err := api.Kube.CoreV1().Pods("a").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the early worker's try after the lost answer", func() bool {
		var asked []string
		for _, a := range api.Ours.Actions()[from:] {
			if v := a.GetVerb(); a.GetResource().Resource == "externalipclaims" && (v == "create" || v == "get") {
				asked = append(asked, v)
			}
		}
		return len(asked) >= 2
	})
	waitFor(t, "the early worker done", func() bool { return n.early.queue.Len() == 0 && n.early.queue.NumRequeues("a/web") == 0 })
	echo()
	if cs := ownersClaims(t, api, p); len(cs) != 1 {
		t.Fatalf("the pod owns %d claims; want 1", len(cs))
	}
	if resp := n.claimFor(t, p, "s1", "v4"); len(resp.Addresses) != 1 || resp.Addresses[0].String() != ownersClaims(t, api, p)[0].Spec.Address {
		t.Errorf("the ADD got %+v; want the one claim's IP", resp)
	}
}

// A pod has two claims of one pool and family, each with its pending
// holder (made twice, by a process that lost a create's answer), and one
// intent: settle fills one, the one the ADD adopts, and drops the other.
func TestSettleFillsOneClaimOfAPodsPoolAndFamilyAndDropsTheOther(t *testing.T) {
	p := asking("a", "web", "n1", "v4")
	owner := v1alpha1.ClaimOwner{Namespace: "a", Pod: &v1alpha1.PodRef{Name: "web", UID: string(p.UID)}}
	pending := v1alpha1.ClaimHolder{Node: "n1", Pod: "web", PodUID: string(p.UID)}
	x, y := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.5")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		newClaim(x, "v4", owner, pending), newClaim(y, "v4", owner, pending),
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1", fast)
	a := attachment(p, "s1")
	if err := nodeapi.MarkIntent(n.dir, nodeapi.Marker{Attachment: a, Pod: nodeapi.Pod{Namespace: "a", Name: "web", UID: string(p.UID)}}); err != nil {
		t.Fatal(err)
	}
	keep := n.early.ownersClaim(earlyKey{ownerKey(owner), "v4", pools.IPv4}).Name
	waitFor(t, "one claim, the one the ADD adopts, holding the attachment", func() bool {
		cs := ownersClaims(t, api, p)
		return len(cs) == 1 && cs[0].Name == keep && len(cs[0].Spec.Holders) == 1 && cs[0].Spec.Holders[0] == n.holderOf(p, "s1")
	})
}

// Settle read an attachment's intent; before it fills the pod's pending
// holder, the claim goes: a DEL released it (and forgot the intent), or
// someone deleted it. Settle does not make it again.
func TestSettleNeverBringsBackAClaimThatWentMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone func(t *testing.T, x adopted)
	}{
		{"released by the pod's DEL", func(t *testing.T, x adopted) { x.n.release(t, x.p, "s1") }},
		{"deleted by someone", func(t *testing.T, x adopted) {
			if err := x.api.Claims.Delete(context.Background(), x.c.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := adoptEarly(t)
			x.fill()
			tc.gone(t, x)
			x.n.early.settleOne(context.Background(), x.c, x.h, []v1alpha1.ClaimHolder{x.n.holderOf(x.p, "s1")}) // as settle, with what it read first
			if got := claimsNow(t, x.api)[x.c.Name]; got != nil {
				t.Errorf("settle made the claim again: %+v", got)
			}
		})
	}
}

// A claim whose create's answer comes after the cache's Add (which drops
// the claims made here once the cache has them) is not kept as made here:
// nothing would drop it, and it would stand for the owner's claim after
// the claim is gone.
func TestAClaimTheCacheHasBeforeItIsKeptIsNotKeptAsMadeHere(t *testing.T) {
	api := claimstest.New()
	n := New(Config{Clients: clientsOf(api), NodeName: "n1", DataDir: t.TempDir(), Log: quiet()})
	c := newClaim(netip.MustParseAddr("192.0.2.1"), "v4", v1alpha1.ClaimOwner{Namespace: "a", Pod: &v1alpha1.PodRef{Name: "web", UID: "u"}},
		v1alpha1.ClaimHolder{Node: "n1", Pod: "web", PodUID: "u"})
	c.UID = "uid-1"
	if err := n.claims.GetStore().Add(c); err != nil {
		t.Fatal(err)
	}
	k := earlyKey{ownerKey(c.Spec.Owner), "v4", pools.IPv4}
	n.early.keep(k, c)
	if got := n.early.made.get(k); got != nil {
		t.Errorf("a claim the cache has is kept as made here: %+v", got)
	}
}

// A node process stopped before its caches synced leaves no goroutine of
// its early claims' queue behind.
func TestRunEndedBeforeTheCachesSyncShutsTheEarlyQueueDown(t *testing.T) {
	n := New(Config{Clients: clientsOf(claimstest.New()), NodeName: "n1", DataDir: t.TempDir(), Log: quiet()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Run(ctx); err == nil {
		t.Fatal("Run of an ended context: no error")
	}
	if !n.early.queue.ShuttingDown() {
		t.Error("the early claims' queue runs on after Run returned")
	}
}
