package claims

import (
	"context"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
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
	for k, set := range e.pendingHere() {
		if attached := byPod[k.podUID]; len(attached) == 1 {
			e.settleAttached(ctx, k.earlyKey, set, attached[0])
			continue
		}
		for _, p := range set {
			e.settleUnattached(ctx, p)
		}
	}
}

// pendingKey names a pod's pending holders in the claims of one owner,
// pool and family: one of them is the pod's; a second was made after a
// create whose answer was lost, by a process that did not ask for it.
type pendingKey struct {
	earlyKey
	podUID string
}

// pendingHolder is the pending holder h of the claim c.
type pendingHolder struct {
	c *v1alpha1.ExternalIPClaim
	h v1alpha1.ClaimHolder
}

// pendingHere are this node's pending holders by pod, owner, pool and
// family, each set by claim name.
func (e *earlyClaims) pendingHere() map[pendingKey][]pendingHolder {
	n := e.n
	out := map[pendingKey][]pendingHolder{}
	for _, c := range n.byIndex(byNode, n.cfg.NodeName) {
		for _, h := range c.Spec.Holders {
			if h.Node == n.cfg.NodeName && isPending(h) {
				k := pendingKey{earlyKey{ownerKey(c.Spec.Owner), c.Spec.Pool, familyOf(c)}, h.PodUID}
				out[k] = append(out[k], pendingHolder{c, h})
			}
		}
	}
	for _, set := range out {
		slices.SortFunc(set, func(a, b pendingHolder) int { return strings.Compare(a.c.Name, b.c.Name) })
	}
	return out
}

// settleAttached gives the attachment h of a pod's one intent (its ADD
// answered, and its fill never came) one claim of the owner's pool and
// family: the one the attachment holds already, else the first by name,
// which its ADD adopted (ownersClaim). The others' pending holders go: a
// pod has one IP of a family from a pool.
func (e *earlyClaims) settleAttached(ctx context.Context, k earlyKey, set []pendingHolder, h v1alpha1.ClaimHolder) {
	a := holderAttachment(h)
	defer e.n.locks.lock(attachmentKey(a))()
	// A DEL that released the attachment since the intents were read has
	// forgotten its intent: there is nothing to fill.
	if has, err := nodeapi.HasIntent(e.n.cfg.DataDir, a); !has || err != nil {
		return
	}
	keep := e.heldBy(a, k)
	if keep == "" {
		keep = set[0].c.Name
	}
	for _, p := range set {
		if p.c.Name == keep {
			e.fillPending(ctx, p.c, h)
			continue
		}
		e.dropPending(ctx, p, []store.Attachment{a}, "a second claim of the pod's pool and family")
	}
}

// heldBy is the name of the claim of k that the attachment holds, "" when
// the cache shows none.
func (e *earlyClaims) heldBy(a store.Attachment, k earlyKey) string {
	for _, name := range e.n.held(a) {
		o, ok, _ := e.n.claims.GetStore().GetByKey(name)
		if c, _ := o.(*v1alpha1.ExternalIPClaim); ok && ownerKey(c.Spec.Owner) == k.owner && c.Spec.Pool == k.pool && familyOf(c) == k.family {
			return name
		}
	}
	return ""
}

// fillPending is settle's fill, which never makes a claim: one gone was
// released (its pod's DEL, the leader's sweep), and is not brought back.
func (e *earlyClaims) fillPending(ctx context.Context, c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder) {
	err := e.writeHolder(ctx, c, h)
	if apierrors.IsNotFound(err) {
		e.n.log.Info("claims: an early claim went before its holder took its pod's attachment", "claim", c.Name, "attachment", holderAttachment(h).String())
		return
	}
	e.filled(c, h, err)
	if err == nil {
		e.n.log.Info("claims: an early claim's holder took the attachment of its pod's earlier ADD", "claim", c.Name, "attachment", holderAttachment(h).String())
	}
}

// settleUnattached drops the pending holder of a pod gone, going or asking
// another pool; a pod still to have its ADD keeps it.
func (e *earlyClaims) settleUnattached(ctx context.Context, p pendingHolder) {
	c, h := p.c, p.h
	pod, err := e.n.local.Core().V1().Pods().Lister().Pods(c.Spec.Owner.Namespace).Get(h.Pod)
	if err == nil && string(pod.UID) == h.PodUID && wantsEarlyClaim(pod) && poolAsked(pod) == c.Spec.Pool {
		return // its ADD is still to come
	}
	e.dropPending(ctx, p, nil, "its pod is gone or going")
}

// dropPending takes the pod's pending holder off its claim, under the
// owner's lock, unless the pod now has an intent besides those of only:
// an ADD writes its intent before it asks, and adopts under that lock, so
// such an intent is an ADD that has adopted the claim or is about to.
func (e *earlyClaims) dropPending(ctx context.Context, p pendingHolder, only []store.Attachment, why string) {
	n := e.n
	c, h := p.c, p.h
	defer n.locks.lock(earlyKey{ownerKey(c.Spec.Owner), c.Spec.Pool, familyOf(c)}.lockKey())()
	if ok, err := e.intentsOnly(h.PodUID, only); !ok || err != nil {
		return
	}
	if err := e.removePending(ctx, c.Name, h); err != nil {
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
