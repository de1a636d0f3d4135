package claims

import (
	"context"
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
)

// Standby is the node's claims as the standby watch (package standby)
// sees them: a takeover names this node its claim's active node, a yield
// takes that name off, and the watch asks which node a claim names when
// two nodes answer for one IP. The watch never waits for the API server:
// writes go on in the background, and the question is answered from the
// informer's cache.
type Standby struct {
	n   *Node
	ctx context.Context
	// backoff paces the tries of a write the API server did not take.
	backoff wait.Backoff

	mu sync.Mutex
	// wants are the IPs with a write under way, each with one writer, so
	// that a yield's write cannot be overtaken by its takeover's.
	wants   map[netip.Addr]*want
	writers sync.WaitGroup
}

// want is what an IP's claim is to say of this node: named active (after
// a takeover) or not (after a yield); gen counts the changes, so that the
// writer knows whether what it wrote is still what is wanted.
type want struct {
	active bool
	reason string
	gen    int
}

// NewStandby is n's claims for the standby watch; its writes end with ctx.
func NewStandby(ctx context.Context, n *Node) *Standby {
	return &Standby{n: n, ctx: ctx, wants: map[netip.Addr]*want{},
		backoff: wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 30 * time.Second}}
}

// TookOver names this node the active node of ip's claim, in the
// background: the takeover is done, and the API server may be out of
// reach (it is tried again, up to every 30 s, until it answers).
func (s *Standby) TookOver(ip netip.Addr, reason string) { s.setWant(ip, true, reason) }

// Yielded takes this node's name off ip's claim, and only this node's:
// the node that takes the IP over names itself, and a claim that names
// another node by then (its write came first) keeps that name, as the
// write is made against the claim's resourceVersion. Left on, the name of
// a node that stands by would make two other nodes that both answer for
// the IP both yield (each reads "another node"). A takeover's write still
// under way gives way to it (one writer per IP, the last want wins).
func (s *Standby) Yielded(ip netip.Addr, reason string) { s.setWant(ip, false, reason) }

// ActiveHere says whether ip's claim names this node active; known is
// false when there is no claim, it names no node, or the node it names
// holds none of it (a name left behind when the API server was out of
// reach). It reads the informer's cache only: the watch asks in its loop.
func (s *Standby) ActiveHere(ip netip.Addr) (here, known bool) {
	c := s.n.cached(ip)
	if c == nil || c.Spec.ActiveNode == "" || !holdsOn(c, c.Spec.ActiveNode) {
		return false, false
	}
	return c.Spec.ActiveNode == s.n.cfg.NodeName, true
}

func (s *Standby) setWant(ip netip.Addr, active bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.wants[ip]; w != nil {
		w.active, w.reason, w.gen = active, reason, w.gen+1
		return // its writer writes it next
	}
	s.wants[ip] = &want{active: active, reason: reason}
	s.writers.Go(func() { s.write(ip) })
}

// write writes ip's want until the claim says it, backing off while the
// API server refuses or is out of reach, until ctx ends.
func (s *Standby) write(ip netip.Addr) {
	err := s.backoff.DelayFunc().Until(s.ctx, true, true, func(ctx context.Context) (bool, error) {
		s.mu.Lock()
		w := *s.wants[ip]
		s.mu.Unlock()
		var err error
		apiclient.Bounded(ctx, apiclient.RequestTimeout, func(ctx context.Context) { err = s.apply(ctx, ip, w.active) })
		if err != nil {
			s.n.log.Warn("claims: naming the active node of a claim; trying again", "ip", ip, "reason", w.reason, "error", err)
			return false, nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.wants[ip].gen != w.gen {
			return false, nil // changed while it was written: write the new one
		}
		delete(s.wants, ip)
		return true, nil
	})
	if err != nil {
		s.mu.Lock()
		delete(s.wants, ip)
		s.mu.Unlock()
	}
}

// apply makes ip's claim name this node active, or no longer name it. A
// node is named only while the claim lists a holder on it: a release
// takes the name off with its node's last holder (removeHolder), and a
// takeover's write that comes later must not put it back. An IP with no
// claim in the synced cache has none: claims are made before an IP is
// held, long before it can be taken over.
func (s *Standby) apply(ctx context.Context, ip netip.Addr, active bool) error {
	if s.n.synced.Load() && s.n.cached(ip) == nil {
		return nil
	}
	me, wrote := s.n.cfg.NodeName, false
	err := s.n.update(ctx, v1alpha1.ClaimName(ip), func(c *v1alpha1.ExternalIPClaim) bool {
		switch {
		case active && c.Spec.ActiveNode != me && holdsOn(c, me):
			c.Spec.ActiveNode = me
		case !active && c.Spec.ActiveNode == me:
			c.Spec.ActiveNode = ""
		default:
			wrote = false
			return false
		}
		wrote = true
		return true
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil && wrote {
		s.n.log.Info("claims: the claim's active node follows this node's takeover or yield", "ip", ip, "node", me, "active", active)
	}
	return err
}

// holdsOn says whether a holder of c is on node.
func holdsOn(c *v1alpha1.ExternalIPClaim, node string) bool {
	return slices.ContainsFunc(c.Spec.Holders, func(h v1alpha1.ClaimHolder) bool { return h.Node == node })
}
