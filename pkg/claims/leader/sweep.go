package leader

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// sweep releases what nobody holds any more, and tells the pools' status
// and the admission policy what there is.
func (l *leader) sweep(ctx context.Context) {
	for _, o := range l.Claims().GetStore().List() {
		if ctx.Err() != nil {
			return
		}
		apiclient.Bounded(ctx, nodeapi.ClaimTimeout, func(ctx context.Context) { l.sweepClaim(ctx, o.(*v1alpha1.ExternalIPClaim)) })
	}
	l.writeStatus(ctx)
	apiclient.Bounded(ctx, apiclient.RequestTimeout, l.writePolicyParams)
}

// sweepClaim takes off the claim every holder whose pod object is gone
// (deleted while its node was down, or a node that never came back), and
// deletes a claim nobody holds, unless a StatefulSet of its name still has
// its ordinal and the pool's ranges still hold its IP: a pool edited to
// shrink gives the ordinal's next pod an IP of its ranges. A held claim
// outside them stays until its holders go, who are told. A pod counts as
// gone only when the server says so: its cache is a hint, the live object
// decides, compared by UID.
func (l *leader) sweepClaim(ctx context.Context, c *v1alpha1.ExternalIPClaim) {
	for _, h := range c.Spec.Holders {
		if l.podAlive(ctx, c.Spec.Owner.Namespace, h.Pod, h.PodUID) {
			continue
		}
		if err := l.RemoveHolder(ctx, c.Name, h); err != nil {
			l.log.Warn("claims: releasing the holder of a gone pod", "claim", c.Name, "pod", c.Spec.Owner.Namespace+"/"+h.Pod, "error", err)
			continue
		}
		l.log.Info("claims: released the holder of a pod that is gone", "claim", c.Name, "pod", c.Spec.Owner.Namespace+"/"+h.Pod, "node", h.Node)
	}
	p := l.Set().Get(c.Spec.Pool)
	outside := p != nil && p.Outside(c.Spec.Address)
	if len(c.Spec.Holders) > 0 {
		if outside {
			l.warnOutside(c)
		}
		return
	}
	// An ordinal keeps its IP only while the pool's ranges hold it.
	if !outside && l.ordinalWanted(ctx, c) {
		return
	}
	if err := l.DeleteClaim(ctx, c); err != nil && !apierrors.IsConflict(err) {
		l.log.Warn("claims: deleting a claim nobody holds", "claim", c.Name, "error", err)
		return
	}
	l.log.Info("claims: deleted a claim nobody holds", "claim", c.Name, "pool", c.Spec.Pool, "namespace", c.Spec.Owner.Namespace, "outsideItsPool", outside)
}

// warnOutside tells each pod holding c, once a term, that its IP lies
// outside its pool's ranges: it keeps it until it goes, and no pod gets
// it after.
func (l *leader) warnOutside(c *v1alpha1.ExternalIPClaim) {
	for _, h := range c.Spec.Holders {
		key := string(c.UID) + "/" + h.PodUID
		if l.warned[key] {
			continue
		}
		l.warned[key] = true
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: c.Spec.Owner.Namespace, Name: h.Pod, UID: types.UID(h.PodUID)}
		l.Events().Eventf(ref, corev1.EventTypeWarning, ReasonOutsidePool,
			"external IP %s lies outside the ranges of pool %s (edited since): the pod keeps it until it goes, then it is released and not given again", c.Spec.Address, c.Spec.Pool)
		l.log.Info("claims: a held claim lies outside its pool's ranges", "claim", c.Name, "pool", c.Spec.Pool, "pod", c.Spec.Owner.Namespace+"/"+h.Pod)
	}
}

// podAlive says whether the pod with that UID exists; an answer it cannot
// get counts as alive, so that nothing is released on a doubt.
func (l *leader) podAlive(ctx context.Context, ns, name, uid string) bool {
	if o, ok, _ := l.pods.GetStore().GetByKey(ns + "/" + name); ok && string(o.(*corev1.Pod).UID) == uid {
		return true
	}
	p, err := l.cfg.Clients.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false
	case err != nil:
		return true
	}
	return string(p.UID) == uid
}

// ordinalWanted says whether a claim nobody holds is kept for its
// StatefulSet: one of that name exists and the ordinal is within its
// range [start, start+replicas). A StatefulSet deleted and made again
// under the same name (to change a field that cannot be changed, its pods
// orphaned and adopted, or made again) is the same one to its users, and
// its ordinals keep their IPs: the claim takes the new one's UID. Compared
// by UID, the new StatefulSet's pod restarting would lose its IP here.
func (l *leader) ordinalWanted(ctx context.Context, c *v1alpha1.ExternalIPClaim) bool {
	o := c.Spec.Owner
	if o.StatefulSet == nil {
		return false
	}
	set, err := l.statefulSet(ctx, o.Namespace, o.StatefulSet.Name)
	if err != nil {
		return !apierrors.IsNotFound(err) // a doubt keeps it
	}
	replicas, start := int32(1), int32(0)
	if set.Spec.Replicas != nil {
		replicas = *set.Spec.Replicas
	}
	if set.Spec.Ordinals != nil {
		start = set.Spec.Ordinals.Start
	}
	if o.StatefulSet.Ordinal < start || o.StatefulSet.Ordinal >= start+replicas {
		return false
	}
	if string(set.UID) != o.StatefulSet.UID {
		l.followStatefulSet(ctx, c.Name, set)
	}
	return true
}

// statefulSet is the StatefulSet of that name: the cache's, else the
// server's.
func (l *leader) statefulSet(ctx context.Context, ns, name string) (*appsv1.StatefulSet, error) {
	if obj, ok, _ := l.sets.GetStore().GetByKey(ns + "/" + name); ok {
		return obj.(*appsv1.StatefulSet), nil
	}
	return l.cfg.Clients.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
}

// followStatefulSet names in the claim the UID of the StatefulSet that
// keeps it now, so that the claim says which one holds the ordinal.
func (l *leader) followStatefulSet(ctx context.Context, name string, set *appsv1.StatefulSet) {
	changed := false
	err := l.Update(ctx, name, func(c *v1alpha1.ExternalIPClaim) bool {
		ref := c.Spec.Owner.StatefulSet
		changed = ref != nil && ref.Name == set.Name && ref.UID != string(set.UID)
		if changed {
			ref.UID = string(set.UID)
		}
		return changed
	})
	if err != nil && !apierrors.IsNotFound(err) {
		l.log.Warn("claims: naming a StatefulSet made again under its name in its claim", "claim", name, "statefulset", set.Namespace+"/"+set.Name, "error", err)
	}
	if err != nil || !changed {
		return
	}
	l.log.Info("claims: a StatefulSet made again under its name keeps its ordinal's claim", "claim", name, "statefulset", set.Namespace+"/"+set.Name, "uid", string(set.UID))
}
