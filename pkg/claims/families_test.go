package claims

import (
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
)

// barrierClaims holds each create until a second one is under way too
// (or a second has passed), and counts the most under way at once.
type barrierClaims struct {
	apiclient.ClaimClient
	mu             sync.Mutex
	inFlight, most int
	arrived        chan struct{}
	arrivedOnce    sync.Once
}

// IsWatchListSemanticsUnSupported passes on the fake's answer to the informer.
func (*barrierClaims) IsWatchListSemanticsUnSupported() bool { return true }

func (b *barrierClaims) Create(ctx context.Context, c *v1alpha1.ExternalIPClaim, o metav1.CreateOptions) (*v1alpha1.ExternalIPClaim, error) {
	b.mu.Lock()
	b.inFlight++
	b.most = max(b.most, b.inFlight)
	if b.inFlight == 2 {
		b.arrivedOnce.Do(func() { close(b.arrived) })
	}
	b.mu.Unlock()
	select {
	case <-b.arrived:
	case <-time.After(time.Second):
	}
	defer func() { b.mu.Lock(); b.inFlight--; b.mu.Unlock() }()
	return b.ClaimClient.Create(ctx, c, o)
}

// A dual-stack pool's request makes its two claims at once, not one
// after the other: each is a round trip to the API server that the ADD
// waits for.
func TestADualStackPoolRequestMakesItsTwoClaimsAtOnce(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("dual", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29", "2001:db8::/125"), NamespaceSelector: everyNamespace()}))
	b := &barrierClaims{ClaimClient: api.Claims, arrived: make(chan struct{})}
	n := startNode(t, api, "n1", func(c *Config) { c.Clients.Claims = b })
	resp := n.claimFor(t, p, "s1", "dual")
	if resp.Reason != "" || resp.Unavailable != "" || len(resp.Addresses) != 2 || !resp.Addresses[0].Is4() || !resp.Addresses[1].Is6() {
		t.Fatalf("claim: %+v; want one IPv4 and one IPv6 address, in that order", resp)
	}
	if b.most != 2 {
		t.Errorf("at most %d creates under way at once, want the 2 families' together", b.most)
	}
	if got := len(claimsNow(t, api)); got != 2 {
		t.Errorf("%d claims, want 2", got)
	}
}
