package claims

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
)

var sharedIP = netip.MustParseAddr("192.0.2.5")

// sharedClaim is the claim of sharedIP as the ADDs of two pods of one
// namespace make it: first on n1, then on n2 (where, with standby, it
// stands by); n2's cache has seen both holders.
func sharedClaim(t *testing.T) (api *claimstest.API, n1, n2 *testNode, updates *updateHook) {
	t.Helper()
	p1, p2 := pod("a", "web-1", "n1"), pod("a", "web-2", "n2")
	api = claimstest.New(namespace("a", nil), node("n1", nil), node("n2", nil), p1, p2,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/28"), NamespaceSelector: everyNamespace()}))
	// Before the nodes start: client-go's fake takes reactors unlocked.
	updates = &updateHook{}
	api.Ours.PrependReactor("update", v1alpha1.ClaimResource, updates.react)
	n1, n2 = startNode(t, api, "n1"), startNode(t, api, "n2")
	for _, h := range []struct {
		n *testNode
		p *corev1.Pod
	}{{n1, p1}, {n2, p2}} {
		if r := h.n.claimFor(t, h.p, "s", "", sharedIP.String()); r.Reason != "" || r.Unavailable != "" {
			t.Fatalf("%s claims %s: %+v", h.n.cfg.NodeName, sharedIP, r)
		}
	}
	for _, n := range []*testNode{n1, n2} {
		waitFor(t, n.cfg.NodeName+"'s cache to hold both holders", func() bool {
			c := n.cached(sharedIP)
			return c != nil && len(c.Spec.Holders) == 2
		})
	}
	return api, n1, n2, updates
}

// standbyOf is n's Standby until the test ends, trying again every 10 ms.
func standbyOf(t *testing.T, n *testNode) *Standby {
	ctx, cancel := context.WithCancel(context.Background())
	s := NewStandby(ctx, n.Node)
	s.backoff.Duration, s.backoff.Cap = 10*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { cancel(); s.writers.Wait() })
	return s
}

func activeNode(t *testing.T, api *claimstest.API) string {
	t.Helper()
	c := claimsNow(t, api)[v1alpha1.ClaimName(sharedIP)]
	if c == nil {
		t.Fatalf("no claim of %s", sharedIP)
	}
	return c.Spec.ActiveNode
}

// updateHook answers each update of a claim before the server does, once
// a test has set how (nil: the server's own answer), and counts them.
type updateHook struct {
	mu     sync.Mutex
	answer func(n int, c *v1alpha1.ExternalIPClaim) error
	n      int
}

func (h *updateHook) set(answer func(n int, c *v1alpha1.ExternalIPClaim) error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answer, h.n = answer, 0
}

func (h *updateHook) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func (h *updateHook) react(a k8stesting.Action) (bool, runtime.Object, error) {
	h.mu.Lock()
	answer := h.answer
	h.n++
	n := h.n
	h.mu.Unlock()
	if answer == nil {
		return false, nil, nil
	}
	if err := answer(n, a.(k8stesting.UpdateAction).GetObject().(*v1alpha1.ExternalIPClaim)); err != nil {
		return true, nil, err
	}
	return false, nil, nil
}

// claimReads counts the reads of one claim from the API server.
func claimReads(api *claimstest.API) int {
	n := 0
	for _, a := range api.Ours.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == v1alpha1.ClaimResource {
			n++
		}
	}
	return n
}

func unreachable() error { return apierrors.NewServiceUnavailable("the API server is out of reach") }

func TestAClaimNamesItsFirstHoldersNodeActiveUntilThatNodeHoldsNoneOfIt(t *testing.T) {
	api, n1, _, _ := sharedClaim(t)
	if got := activeNode(t, api); got != "n1" {
		t.Fatalf("a claim made on n1 and joined on n2 names %q active, want n1 (the node that made it, where nobody else answered)", got)
	}
	n1.release(t, pod("a", "web-1", "n1"), "s")
	if got := activeNode(t, api); got != "" {
		t.Errorf("n1 released its holder and the claim names %q active, want none: n1 answers for nothing", got)
	}
}

func TestATakeoverNamesTheNodeInTheClaimWithoutWaitingForTheAPIServer(t *testing.T) {
	api, _, n2, updates := sharedClaim(t)
	reached, back := make(chan struct{}), make(chan struct{})
	updates.set(func(n int, _ *v1alpha1.ExternalIPClaim) error {
		if n == 1 { // the API server hangs, then fails
			close(reached)
			<-back
			return unreachable()
		}
		return nil
	})
	s := standbyOf(t, n2)
	returned := make(chan struct{})
	go func() { s.TookOver(sharedIP, "unanswered"); close(returned) }()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("TookOver waited for the API server: the takeover would wait with it")
	}
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		close(back)
		t.Fatal("a takeover wrote nothing to the claim")
	}
	close(back)
	waitFor(t, "the claim to name n2 active", func() bool { return activeNode(t, api) == "n2" })
	if n := updates.count(); n < 2 {
		t.Errorf("%d updates: the write the server failed was not tried again", n)
	}
}

func TestATakeoverThatLosesToAnotherWriterTriesAgainFromTheServersCopy(t *testing.T) {
	api, _, n2, updates := sharedClaim(t)
	// Another writer gets there first: the claim changes under n2's copy.
	updates.set(func(n int, c *v1alpha1.ExternalIPClaim) error {
		if n != 1 {
			return nil
		}
		cur, err := api.Tracker.Get(v1alpha1.Claims, "", c.Name)
		if err != nil {
			return err
		}
		o := cur.(*v1alpha1.ExternalIPClaim).DeepCopy()
		o.Labels["other-writer"] = "was here"
		rv, _ := strconv.Atoi(o.ResourceVersion)
		o.ResourceVersion = strconv.Itoa(rv + 1000)
		return api.Tracker.Update(v1alpha1.Claims, o, "")
	})
	s := standbyOf(t, n2)
	s.TookOver(sharedIP, "unanswered")
	s.writers.Wait()
	c := claimsNow(t, api)[v1alpha1.ClaimName(sharedIP)]
	if c.Spec.ActiveNode != "n2" || c.Labels["other-writer"] == "" {
		t.Errorf("after a conflict the claim names %q active, labels %v: want n2, and the other writer's change kept", c.Spec.ActiveNode, c.Labels)
	}
}

func TestAYieldTakesOnlyThisNodesNameOffTheClaim(t *testing.T) {
	for _, named := range []string{"n2", "n1"} {
		t.Run(fmt.Sprintf("the claim names %s", named), func(t *testing.T) {
			api, n1, n2, _ := sharedClaim(t)
			s := map[string]*Standby{"n1": standbyOf(t, n1), "n2": standbyOf(t, n2)}
			s[named].TookOver(sharedIP, "unanswered")
			s[named].writers.Wait()
			s["n2"].Yielded(sharedIP, "uplink-down")
			s["n2"].writers.Wait()
			want := map[string]string{"n2": "", "n1": "n1"}[named]
			if got := activeNode(t, api); got != want {
				t.Errorf("n2 yielded and the claim names %q active, want %q", got, want)
			}
		})
	}
}

func TestAYieldOvertakesATakeoverWriteStillUnderWay(t *testing.T) {
	api, _, n2, updates := sharedClaim(t)
	var mu sync.Mutex
	down, tried := true, make(chan struct{}, 1)
	updates.set(func(int, *v1alpha1.ExternalIPClaim) error {
		mu.Lock()
		defer mu.Unlock()
		select {
		case tried <- struct{}{}:
		default:
		}
		if down {
			return unreachable()
		}
		return nil
	})
	s := standbyOf(t, n2)
	s.TookOver(sharedIP, "unanswered")
	select {
	case <-tried:
	case <-time.After(10 * time.Second):
		t.Fatal("a takeover wrote nothing to the claim")
	}
	s.Yielded(sharedIP, "conflict")
	mu.Lock()
	down = false
	mu.Unlock()
	s.writers.Wait()
	if got := activeNode(t, api); got == "n2" {
		t.Errorf("n2 took over, then yielded while the API server was out of reach; once it answered, the claim names n2 active")
	}
}

func TestWhichNodeTheClaimNamesIsReadFromTheCache(t *testing.T) {
	api, n1, n2, _ := sharedClaim(t)
	s1, s2 := standbyOf(t, n1), standbyOf(t, n2)
	before := claimReads(api)
	for _, tc := range []struct {
		s           *Standby
		ip          netip.Addr
		here, known bool
	}{
		{s1, sharedIP, true, true},
		{s2, sharedIP, false, true},
		{s2, netip.MustParseAddr("192.0.2.6"), false, false}, // no claim
	} {
		if here, known := tc.s.ActiveHere(tc.ip); here != tc.here || known != tc.known {
			t.Errorf("%s asks of %s: here %v known %v, want %v %v", tc.s.n.cfg.NodeName, tc.ip, here, known, tc.here, tc.known)
		}
	}
	if after := claimReads(api); after != before {
		t.Errorf("the question read %d claims from the API server, want none", after-before)
	}
	// A name left on a node that holds none of the IP decides nothing.
	cur, _ := api.Tracker.Get(v1alpha1.Claims, "", v1alpha1.ClaimName(sharedIP))
	o := cur.(*v1alpha1.ExternalIPClaim).DeepCopy()
	o.Spec.ActiveNode = "n3"
	if err := api.Tracker.Update(v1alpha1.Claims, o, ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n2's cache to see the claim name n3", func() bool { return n2.cached(sharedIP).Spec.ActiveNode == "n3" })
	if here, known := s2.ActiveHere(sharedIP); here || known {
		t.Errorf("the claim names n3, which holds none of it: here %v known %v, want neither", here, known)
	}
}
