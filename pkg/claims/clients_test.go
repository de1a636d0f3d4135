package claims

import (
	"context"
	"net/netip"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// deadlineClaims is the fake's claims client, counting the requests that
// carry no deadline: with no Timeout in the clients, such a request would
// wait for ever on an API server that does not answer.
type deadlineClaims struct {
	claimstest.FakeClaims
	unbounded atomic.Int32
}

func (d *deadlineClaims) check(ctx context.Context) {
	if _, ok := ctx.Deadline(); !ok {
		d.unbounded.Add(1)
	}
}

func (d *deadlineClaims) Get(ctx context.Context, name string, o metav1.GetOptions) (*v1alpha1.ExternalIPClaim, error) {
	d.check(ctx)
	return d.FakeClaims.Get(ctx, name, o)
}

func (d *deadlineClaims) Create(ctx context.Context, c *v1alpha1.ExternalIPClaim, o metav1.CreateOptions) (*v1alpha1.ExternalIPClaim, error) {
	d.check(ctx)
	return d.FakeClaims.Create(ctx, c, o)
}

func (d *deadlineClaims) Update(ctx context.Context, c *v1alpha1.ExternalIPClaim, o metav1.UpdateOptions) (*v1alpha1.ExternalIPClaim, error) {
	d.check(ctx)
	return d.FakeClaims.Update(ctx, c, o)
}

func (d *deadlineClaims) Delete(ctx context.Context, name string, o metav1.DeleteOptions) error {
	d.check(ctx)
	return d.FakeClaims.Delete(ctx, name, o)
}

// deadlinePools is the fake's pools client, counting as deadlineClaims.
type deadlinePools struct {
	claimstest.FakePools
	unbounded *atomic.Int32
}

func (d *deadlinePools) UpdateStatus(ctx context.Context, p *v1alpha1.ExternalIPPool, o metav1.UpdateOptions) (*v1alpha1.ExternalIPPool, error) {
	if _, ok := ctx.Deadline(); !ok {
		d.unbounded.Add(1)
	}
	return d.FakePools.UpdateStatus(ctx, p, o)
}

// The clients have no Timeout (it would cut the watches): every request
// the node process makes of its own accord (an early claim and its fill,
// the leader's sweep and status, the node's pass, a standby write) must
// bound itself, or an API server that stops answering holds it for ever.
// (A pod deleted is not what the sweep finds here: the fake's watch may
// miss the deletion between its list and its watch, and the leader's
// cache keep the pod.)
func TestEveryRequestOfTheNodeProcessCarriesADeadline(t *testing.T) {
	early, leaving := asking("a", "early", "n1", "p"), asking("a", "leaving", "n1", "p")
	stray := pod("a", "stray", "n1")
	// The claim of a StatefulSet gone, which nobody holds: the leader's.
	goneIP := netip.MustParseAddr("198.51.100.9")
	unheld := newClaim(goneIP, "gone", v1alpha1.ClaimOwner{Namespace: "a", StatefulSet: &v1alpha1.StatefulSetRef{Name: "db", UID: "uid-db"}}, v1alpha1.ClaimHolder{})
	unheld.Spec.Holders, unheld.Spec.ActiveNode = nil, ""
	api := claimstest.New(namespace("a", nil), node("n1", nil), early, leaving, stray, unheld,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	claims := &deadlineClaims{FakeClaims: api.Claims}
	n := startNode(t, api, "n1", fast, func(c *Config) {
		c.Clients.Claims, c.Clients.Pools = claims, &deadlinePools{FakePools: api.Pools, unbounded: &claims.unbounded}
	})
	waitFor(t, "the early claims", func() bool {
		return len(ownersClaims(t, api, early)) == 1 && len(ownersClaims(t, api, leaving)) == 1
	})
	ip := n.claimFor(t, early, "s", "p").Addresses[0]
	waitFor(t, "the early claim filled", func() bool { return !isPending(ownersClaims(t, api, early)[0].Spec.Holders[0]) })
	strayIP := n.claimFor(t, stray, "s", "p").Addresses[0]
	// A pod that asks another pool now: its pending holder goes by the
	// node's pass alone (the leader's sweep keeps the holders of live pods).
	leaving.Annotations["external-ip/pool"] = "none"
	if _, err := api.Kube.CoreV1().Pods("a").Update(context.Background(), leaving, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := nodeapi.Forget(n.dir, attachment(stray, "s")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	NewStandby(ctx, n.Node).Yielded(ip, "test")
	gone1 := func(ip netip.Addr) func() bool {
		return func() bool { return claimsNow(t, api)[v1alpha1.ClaimName(ip)] == nil }
	}
	waitFor(t, "the leader's sweep to delete the claim of a StatefulSet gone", gone1(goneIP))
	waitFor(t, "the node's pass to drop the holder with no intent", gone1(strayIP))
	waitFor(t, "the node's pass to drop the pending holder of the pod asking another pool", func() bool { return len(ownersClaims(t, api, leaving)) == 0 })
	waitFor(t, "the yield written", func() bool { return claimsNow(t, api)[v1alpha1.ClaimName(ip)].Spec.ActiveNode == "" })
	waitFor(t, "the pool's status written", func() bool {
		p, err := api.Pools.Get(context.Background(), "p", metav1.GetOptions{})
		return err == nil && p.Status.Used == 1
	})
	if u := claims.unbounded.Load(); u != 0 {
		t.Errorf("%d requests to the API server carried no deadline", u)
	}
}
