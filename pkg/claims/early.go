package claims

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/config"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/pools"
)

// Claims made when a pod is scheduled. A pod that asks a pool by its
// annotation is on this node (spec.nodeName) well before the kubelet has
// made its sandbox and the runtime runs the plugin's ADD: pulling images,
// making the sandbox and the main plugin's own ADD take hundreds of
// milliseconds at least. The claim's create, the API server's write to
// etcd, is most of what a pool ADD would otherwise wait for (8 ms of
// 11 ms over an explicit IP's ADD at an exec floor of 9 ms). So the node
// process makes the claim as soon as its cache sees the pod, with the pod
// as owner, exactly as the ADD would, and a holder that names this node
// and the pod but no attachment yet (pending). The ADD then finds its
// owner's claim, answers at once, and writes the attachment into that
// holder after it has answered. Nothing about ownership changes: the
// claim exists, made with create-if-absent and naming its owner and node,
// before the node holds the IP.

// earlyRetries bounds the tries of one pod's early claim: past them the
// ADD makes the claim itself.
const earlyRetries = 5

// earlyKey names the claim an owner has of one family of one pool.
type earlyKey struct {
	owner, pool string
	family      pools.Family
}

// earlyClaims makes the claims of pods scheduled here, and settles their
// pending holders.
type earlyClaims struct {
	n *Node
	// made are the claims made for owners until the cache shows them.
	made madeClaims
	// queue has the pods to claim for.
	queue workqueue.TypedRateLimitingInterface[string]
}

// madeClaims are the claims this process made for owners (early, or by an
// ADD) until the cache shows them: an ADD must find its pod's early claim,
// and an early claim its pod's ADD's, even before the watch's echo.
type madeClaims struct {
	mu sync.Mutex
	by map[earlyKey]*v1alpha1.ExternalIPClaim
	// tries are the names, by owner, whose create failed without an
	// answer (the server may have made them all the same), until the
	// owner's next look asks the server.
	tries sync.Map
}

func (e *madeClaims) get(k earlyKey) *v1alpha1.ExternalIPClaim {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.by[k]
}

// put keeps c unless the cache has it already: the cache's Add, which
// drops it, may have come between the create's answer and this put, and
// nothing would drop it then.
func (e *madeClaims) put(k earlyKey, c *v1alpha1.ExternalIPClaim, cached cache.Store) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o, ok, _ := cached.GetByKey(c.Name); ok && o.(*v1alpha1.ExternalIPClaim).UID == c.UID {
		return
	}
	if e.by == nil {
		e.by = map[earlyKey]*v1alpha1.ExternalIPClaim{}
	}
	e.by[k] = c
}

func (e *madeClaims) drop(k earlyKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.by, k)
}

// watch queues every pod of this node that may want an early claim, as
// the cache sees it added or changed.
func (e *earlyClaims) watch() {
	n := e.n
	e.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "external-ip-early-claims"})
	enqueue := func(o any) {
		if p, ok := o.(*corev1.Pod); ok && wantsEarlyClaim(p) {
			if k, err := cache.MetaNamespaceKeyFunc(p); err == nil {
				e.queue.Add(k)
			}
		}
	}
	n.local.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
	})
}

// poolAsked is the pool the pod's annotation names, as the plugin reads it.
func poolAsked(p *corev1.Pod) string { return strings.TrimSpace(p.Annotations[config.PoolAnnotation]) }

// wantsEarlyClaim: a pod that asks a pool by its annotation and will get
// an ADD: not on the host's network, not on its way out, not finished.
func wantsEarlyClaim(p *corev1.Pod) bool {
	return poolAsked(p) != "" && !p.Spec.HostNetwork && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// run serves the queue until it is shut down.
func (e *earlyClaims) run(ctx context.Context) {
	n := e.n
	for {
		key, shutdown := e.queue.Get()
		if shutdown {
			return
		}
		claimCtx, cancel := context.WithTimeout(ctx, nodeapi.ClaimTimeout) // as an ADD's claim
		err := e.claim(claimCtx, key)
		cancel()
		switch {
		case err == nil:
			e.queue.Forget(key)
		case e.queue.NumRequeues(key) < earlyRetries && ctx.Err() == nil:
			e.queue.AddRateLimited(key)
		default:
			n.log.Warn("claims: no early claim; the pod's ADD makes it", "pod", key, "error", err)
			e.queue.Forget(key)
		}
		e.queue.Done(key)
	}
}

// claim claims the pool's IPs for the pod of key, as the ADD would, with a
// pending holder. What the ADD would refuse is left to it: its refusal is
// the one with the event and the CNI error.
func (e *earlyClaims) claim(ctx context.Context, key string) error {
	n := e.n
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	pod, err := n.local.Core().V1().Pods().Lister().Pods(ns).Get(name)
	if err != nil || pod.Spec.NodeName != n.cfg.NodeName || !wantsEarlyClaim(pod) {
		return nil // gone or changed since: nothing to do
	}
	p := n.set.Load().Get(poolAsked(pod))
	who, resp := n.requester(ctx, nodeapi.Pod{Namespace: ns, Name: name, UID: string(pod.UID)})
	switch {
	case resp != nil && resp.Unavailable != "":
		return errors.New(resp.Unavailable) // the namespace not read: again
	case resp != nil || p == nil:
		return nil
	}
	g := &grant{n: n, ctx: ctx, req: nodeapi.Request{Pool: p.Name(), Pod: who.pod}, who: who,
		holder: v1alpha1.ClaimHolder{Node: n.cfg.NodeName, Pod: name, PodUID: string(pod.UID)}}
	if g.admitted(p, "") != nil {
		return nil
	}
	owner := who.poolOwner()
	for _, f := range p.Ranges.Families() {
		if err := g.claimFamilyEarly(p, f, owner); err != nil {
			return err
		}
	}
	return nil
}

// claimFamilyEarly makes the owner's claim of family f unless it has one;
// under the owner's lock, which the ADD takes too.
func (g *grant) claimFamilyEarly(p *pools.Pool, f pools.Family, owner v1alpha1.ClaimOwner) error {
	k := earlyKey{ownerKey(owner), p.Name(), f}
	defer g.n.locks.lock(k.lockKey())()
	if c, err := g.n.early.find(g.ctx, k); c != nil || err != nil {
		return err
	}
	start := time.Now()
	ip, resp := g.allocate(p, f, owner)
	switch {
	case resp != nil && resp.Unavailable != "":
		return errors.New(resp.Unavailable)
	case resp != nil:
		return nil // exhausted: the ADD says so
	}
	g.n.log.Info("claims: claimed for a pod scheduled here, before its ADD", "pod", owner.Namespace+"/"+g.holder.Pod, "address", ip.String(), "took", time.Since(start).String())
	return nil
}

// cached forgets a claim made here once the cache has it.
func (e *earlyClaims) cached(o any) {
	if c, ok := o.(*v1alpha1.ExternalIPClaim); ok {
		e.made.drop(earlyKey{ownerKey(c.Spec.Owner), c.Spec.Pool, familyOf(c)})
	}
}

// ownersClaim is the owner's claim of one family of one pool: the cache's,
// else the one this process made early and the cache has not shown yet.
// Of two (a create whose answer was lost, made again), the first by name,
// as settle keeps. A claim nobody holds that an edit of the pool's ranges
// left outside them is not kept for its owner (a StatefulSet's ordinal):
// the owner gets an IP of the ranges, and the leader releases that one.
func (e *earlyClaims) ownersClaim(k earlyKey) *v1alpha1.ExternalIPClaim {
	var found *v1alpha1.ExternalIPClaim
	p := e.n.set.Load().Get(k.pool)
	for _, c := range e.n.byIndex(byOwner, k.owner) {
		if len(c.Spec.Holders) == 0 && p != nil && p.Outside(c.Spec.Address) {
			continue
		}
		if c.Spec.Pool == k.pool && familyOf(c) == k.family && (found == nil || c.Name < found.Name) {
			found = c
		}
	}
	if found != nil {
		e.made.drop(k)
		return found
	}
	return e.made.get(k)
}

// find is ownersClaim, once the server has been asked for the claim whose
// create failed without an answer, if any: the server may have made it,
// and the cache not shown it yet, and another IP would be a second claim.
// The caller holds the owner's lock.
func (e *earlyClaims) find(ctx context.Context, k earlyKey) (*v1alpha1.ExternalIPClaim, error) {
	if name, ok := e.made.tries.LoadAndDelete(k); ok {
		c, err := e.n.cfg.Clients.Claims.Get(ctx, name.(string), metav1.GetOptions{})
		switch {
		case err == nil && ownerKey(c.Spec.Owner) == k.owner && c.Spec.Pool == k.pool:
			e.keep(k, c)
		case err != nil && !apierrors.IsNotFound(err):
			e.made.tries.Store(k, name) // asked again next time
			return nil, err
		}
	}
	return e.ownersClaim(k), nil
}

// keep keeps a claim made (or found) for the owner until the cache has it.
func (e *earlyClaims) keep(k earlyKey, c *v1alpha1.ExternalIPClaim) {
	e.made.put(k, c, e.n.claims.GetStore())
}

func (k earlyKey) lockKey() string {
	return "owner/" + k.owner + "/" + k.pool + "/" + k.family.String()
}

func familyOf(c *v1alpha1.ExternalIPClaim) pools.Family {
	ip, err := netip.ParseAddr(c.Spec.Address)
	if err != nil {
		return -1
	}
	return pools.FamilyOf(ip)
}

// isPending says whether h is a holder an early claim left for its pod,
// whose attachment the pod's ADD has not written yet.
func isPending(h v1alpha1.ClaimHolder) bool {
	return h.Network == "" && h.ContainerID == "" && h.IfName == ""
}

// pendingIndex is the index of the pod's pending holder on node, or -1.
func pendingIndex(c *v1alpha1.ExternalIPClaim, node, podUID string) int {
	return slices.IndexFunc(c.Spec.Holders, func(h v1alpha1.ClaimHolder) bool {
		return isPending(h) && h.Node == node && h.PodUID == podUID
	})
}

// adopt takes the claim an early claim made for this pod: the IP is the
// pod's and this node's already, so the ADD answers without a write; the
// attachment goes into the pending holder after the answer (fill).
func (g *grant) adopt(c *v1alpha1.ExternalIPClaim) bool {
	if pendingIndex(c, g.holder.Node, g.holder.PodUID) < 0 {
		return false
	}
	g.pending = append(g.pending, c.DeepCopy())
	return true
}

// fill writes the attachment's holder into each claim the ADD adopted, in
// place of the pod's pending one. Nothing releases a live pod's pending
// holder while it has an intent, but the node must never hold an IP
// unclaimed: a claim gone meanwhile is made again, and one made again for
// another owner meanwhile is left as it is, an error on the log and an
// event on the pod. A write the API server did not take (it is down) is
// left to the node's next pass (settle), which tries again.
func (e *earlyClaims) fill(claims []*v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder) {
	ctx, cancel := context.WithTimeout(context.Background(), nodeapi.ClaimTimeout)
	defer cancel()
	for _, c := range claims {
		err := e.writeHolder(ctx, c, h)
		if apierrors.IsNotFound(err) {
			err = e.remake(ctx, c, h)
		}
		e.filled(c, h, err)
	}
}

// errNotTheClaim is a fill's error when the claim of that name is not the
// one adopted: deleted and made again since, for another owner or anew.
var errNotTheClaim = errors.New("the claim was deleted and made again since the pod's ADD adopted it")

// writeHolder puts h in place of its pod's pending holder in the claim c
// was read from: the server's copy must be that claim (its UID) of that
// owner, never one made again since, whose IP the ADD did not take.
func (e *earlyClaims) writeHolder(ctx context.Context, c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder) error {
	var other error
	err := e.n.update(ctx, c.Name, func(cur *v1alpha1.ExternalIPClaim) bool {
		if other = nil; cur.UID != c.UID || ownerKey(cur.Spec.Owner) != ownerKey(c.Spec.Owner) {
			other = errNotTheClaim
			return false
		}
		return takePending(cur, h)
	})
	if err == nil {
		err = other
	}
	return err
}

// remake makes again, for its owner, the claim an ADD adopted and that went
// before its attachment was written in; another owner's claim of its IP
// now is errNotTheClaim.
func (e *earlyClaims) remake(ctx context.Context, c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder) error {
	ip, _ := netip.ParseAddr(c.Spec.Address)
	_, err := e.n.create(ctx, newClaim(ip, c.Spec.Pool, c.Spec.Owner, h))
	if apierrors.IsAlreadyExists(err) {
		return errNotTheClaim
	}
	return err
}

// filled logs how writing h into c went, and remembers it held.
func (e *earlyClaims) filled(c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder, err error) {
	n := e.n
	a := holderAttachment(h)
	switch {
	case errors.Is(err, errNotTheClaim):
		n.log.Error("claims: a pod's early claim went, and another claim has its IP now", "claim", c.Name, "attachment", a.String())
		e.lost(c, h, err)
	case err != nil:
		n.log.Warn("claims: writing the attachment into its pod's early claim; the node's next pass tries again", "claim", c.Name, "attachment", a.String(), "error", err)
	default:
		n.remember(a, []string{c.Name})
	}
}

// takePending puts h in place of its pod's pending holder, or beside the
// others when the pending one went; false when h is there already.
func takePending(c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder) bool {
	if holderIndex(c, h) >= 0 {
		return false
	}
	if i := pendingIndex(c, h.Node, h.PodUID); i >= 0 {
		c.Spec.Holders[i] = h
		return true
	}
	c.Spec.Holders = append(c.Spec.Holders, h)
	return true
}

// reasonEarlyClaimLost is the reason of the Warning event on a pod whose
// early claim could not take its attachment.
const reasonEarlyClaimLost = "ExternalIPClaimLost"

// lost tells the pod and the metrics that its ADD holds an IP its
// claim does not name it for.
func (e *earlyClaims) lost(c *v1alpha1.ExternalIPClaim, h v1alpha1.ClaimHolder, err error) {
	n := e.n
	n.refused(reasonEarlyClaimLost)
	if n.events != nil {
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: c.Spec.Owner.Namespace, Name: h.Pod, UID: types.UID(h.PodUID)}
		n.events.Eventf(ref, corev1.EventTypeWarning, reasonEarlyClaimLost, "external IP %s: its claim could not name this pod's attachment on node %s: %v", c.Spec.Address, h.Node, err)
	}
}
