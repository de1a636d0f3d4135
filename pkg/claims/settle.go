package claims

import (
	"context"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

// settle settles the pending holders on this node that no ADD is about
// to fill: one whose pod is gone from this node, on its way out or
// finished, or asks another pool now, goes (and its claim with it, as at
// a DEL); one whose pod's ADD answered before this process stopped, and
// so never filled it, takes that pod's attachment when the pod has
// exactly one intent. A pod with none yet keeps it: its ADD is to come.
func (e *earlyClaims) settle(ctx context.Context) {
	n := e.n
	intents, err := nodeapi.Intents(n.cfg.DataDir)
	if err != nil {
		n.log.Error("claims: reading intents", "error", err)
		return
	}
	byPod := map[string][]v1alpha1.ClaimHolder{}
	for _, m := range intents {
		a := m.Attachment
		byPod[m.Pod.UID] = append(byPod[m.Pod.UID], v1alpha1.ClaimHolder{Node: n.cfg.NodeName, Pod: m.Pod.Name, PodUID: m.Pod.UID,
			Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName})
	}
	// By name: of two claims of one pod's pool and family (a create whose
	// answer was lost, made again), the first is filled, as ownersClaim
	// has the ADD adopt it, and the other goes.
	cs := n.byIndex(byNode, n.cfg.NodeName)
	slices.SortFunc(cs, func(a, b *v1alpha1.ExternalIPClaim) int { return strings.Compare(a.Name, b.Name) })
	for _, c := range cs {
		for _, h := range c.Spec.Holders {
			if h.Node == n.cfg.NodeName && isPending(h) {
				e.settleOne(ctx, c, h, byPod[h.PodUID])
			}
		}
	}
}

func (e *earlyClaims) settleOne(ctx context.Context, c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder, attached []v1alpha1.ClaimHolder) {
	if len(attached) == 1 {
		apiclient.Bounded(ctx, apiclient.RequestTimeout, func(ctx context.Context) { e.settleAttached(ctx, c, h, attached[0]) })
		return
	}
	pod, err := e.n.local.Core().V1().Pods().Lister().Pods(c.Spec.Owner.Namespace).Get(h.Pod)
	if err == nil && string(pod.UID) == h.PodUID && wantsEarlyClaim(pod) && poolAsked(pod) == c.Spec.Pool {
		return // its ADD is still to come
	}
	e.dropPending(ctx, c, h, nil, "its pod is gone or going")
}

// settleAttached writes the attachment of the pod's one intent into its
// pending holder (its ADD answered, and its fill never came), unless the
// attachment holds another claim of the pool and family already: a pod
// has one IP of a family from a pool, and that pending holder goes.
func (e *earlyClaims) settleAttached(ctx context.Context, c *v1alpha1.ExternalIPClaim, h, att v1alpha1.ClaimHolder) {
	a := holderAttachment(att)
	unlock, err := e.n.locks.LockContext(ctx, attachmentKey(a))
	if err != nil {
		return // the node stops while the ADD's fill is still to come
	}
	defer unlock()
	// A DEL that released the attachment since the intents were read has
	// forgotten its intent: there is nothing to fill.
	if has, err := nodeapi.HasIntent(e.n.cfg.DataDir, a); !has || err != nil {
		return
	}
	if other := e.heldAlike(a, c); other != "" {
		e.dropPending(ctx, c, h, []store.Attachment{a}, "the pod holds "+other+" of the same pool and family")
		return
	}
	err = e.writeHolder(ctx, c, att)
	if apierrors.IsNotFound(err) {
		// Gone since it was read (the leader's sweep, a delete): a fill
		// of settle's never makes a claim again.
		return
	}
	e.filled(c, att, err)
	if err == nil {
		e.n.log.Info("claims: an early claim's holder took the attachment of its pod's earlier ADD", "claim", c.Name, "attachment", a.String())
	}
}

// heldAlike is the name of another claim of c's owner, pool and family
// that the attachment holds, "" when there is none.
func (e *earlyClaims) heldAlike(a store.Attachment, c *v1alpha1.ExternalIPClaim) string {
	for _, name := range e.n.held(a) {
		o, ok, _ := e.n.claims.GetStore().GetByKey(name)
		if x, _ := o.(*v1alpha1.ExternalIPClaim); ok && name != c.Name && ownerKey(x.Spec.Owner) == ownerKey(c.Spec.Owner) && x.Spec.Pool == c.Spec.Pool && familyOf(x) == familyOf(c) {
			return name
		}
	}
	return ""
}

// dropPending takes the pod's pending holder off its claim, under the
// owner's lock, unless the pod now has an intent besides those of only:
// an ADD writes its intent before it asks, and adopts under that lock, so
// such an intent is an ADD that has adopted the claim or is about to.
func (e *earlyClaims) dropPending(ctx context.Context, c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder, only []store.Attachment, why string) {
	n := e.n
	defer n.locks.lock(earlyKey{ownerKey(c.Spec.Owner), c.Spec.Pool, familyOf(c)}.lockKey())()
	if ok, err := e.intentsOnly(h.PodUID, only); !ok || err != nil {
		return
	}
	rmCtx, cancel := context.WithTimeout(ctx, apiclient.RequestTimeout)
	defer cancel()
	if err := e.removePending(rmCtx, c.Name, h); err != nil {
		n.log.Warn("claims: dropping a pending holder", "claim", c.Name, "pod", h.Pod, "why", why, "error", err)
		return
	}
	n.log.Info("claims: dropped a pending holder", "claim", c.Name, "pod", c.Spec.Owner.Namespace+"/"+h.Pod, "why", why)
}

// intentsOnly says whether the pod's intents are all among only.
func (e *earlyClaims) intentsOnly(podUID string, only []store.Attachment) (bool, error) {
	intents, err := nodeapi.Intents(e.n.cfg.DataDir)
	if err != nil {
		return false, err
	}
	for _, m := range intents {
		if m.Pod.UID == podUID && !slices.Contains(only, m.Attachment) {
			return false, nil
		}
	}
	return true, nil
}

// removePending takes the pod's pending holder off the claim, deleting
// the claim when nobody else holds it (as removeHolder).
func (e *earlyClaims) removePending(ctx context.Context, name string, h v1alpha1.ClaimHolder) error {
	n := e.n
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		c, err := n.latest(ctx, name, false)
		if err != nil {
			return err
		}
		i := pendingIndex(c, h.Node, h.PodUID)
		if i < 0 {
			return nil
		}
		c.Spec.Holders = slices.Delete(c.Spec.Holders, i, i+1)
		if !holdsOn(c, c.Spec.ActiveNode) {
			c.Spec.ActiveNode = ""
		}
		return n.store(ctx, c)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
