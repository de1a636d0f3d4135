package claims

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/store"
)

// create makes a claim if no claim of its name exists: the API server's
// create-if-absent is what gives an IP one owner, whatever the caches say.
// The claim made is the server's, with its UID.
func (n *Node) create(ctx context.Context, c *v1alpha1.ExternalIPClaim) (*v1alpha1.ExternalIPClaim, error) {
	return n.cfg.Clients.Claims.Create(ctx, c, metav1.CreateOptions{})
}

// update changes a claim by change, which says whether it changed it (and
// may run more than once), and tries again from the server's copy when
// another writer got there first (optimistic concurrency: the update
// carries the resourceVersion read). The first try starts from the cache,
// so that a claim seldom costs a read.
func (n *Node) update(ctx context.Context, name string, change func(*v1alpha1.ExternalIPClaim) bool) error {
	fromCache := true
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		c, err := n.latest(ctx, name, fromCache)
		if err != nil {
			return err
		}
		changed := change(c)
		if !changed && fromCache {
			// Nothing to change as far as the cache knows; it may be
			// behind (the claim deleted a moment ago): the server decides.
			if c, err = n.latest(ctx, name, false); err != nil {
				return err
			}
			changed = change(c)
		}
		fromCache = false
		if !changed {
			return nil
		}
		_, err = n.cfg.Clients.Claims.Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
}

// latest is a copy of the claim, from the cache when it has it and
// fromCache, else from the server.
func (n *Node) latest(ctx context.Context, name string, fromCache bool) (*v1alpha1.ExternalIPClaim, error) {
	if fromCache {
		if o, ok, _ := n.claims.GetStore().GetByKey(name); ok {
			return o.(*v1alpha1.ExternalIPClaim).DeepCopy(), nil
		}
	}
	return n.cfg.Clients.Claims.Get(ctx, name, metav1.GetOptions{})
}

// removeHolder takes the attachment off the claim and deletes the claim
// once nobody holds it, unless a StatefulSet's ordinal keeps it. The
// delete carries the claim's UID and resourceVersion as preconditions: a
// holder that joined meanwhile makes it fail, and the next try sees it.
func (n *Node) removeHolder(ctx context.Context, name string, a store.Attachment) error {
	h := v1alpha1.ClaimHolder{Network: a.Network, ContainerID: a.ContainerID, IfName: a.IfName}
	fromCache := true
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		c, err := n.latest(ctx, name, fromCache)
		if err == nil && fromCache && holderIndex(c, h) < 0 {
			// The cache may not have seen the holder join yet: ask.
			c, err = n.latest(ctx, name, false)
		}
		fromCache = false
		if err != nil {
			return err
		}
		i := holderIndex(c, h)
		if i < 0 {
			return nil
		}
		c.Spec.Holders = append(c.Spec.Holders[:i], c.Spec.Holders[i+1:]...)
		if !holdsOn(c, c.Spec.ActiveNode) {
			c.Spec.ActiveNode = "" // a node that holds none of the IP answers for none of it
		}
		return n.store(ctx, c)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// store writes a claim whose holders changed: deleted when it has none
// and no StatefulSet keeps it, else updated.
func (n *Node) store(ctx context.Context, c *v1alpha1.ExternalIPClaim) error {
	if len(c.Spec.Holders) > 0 || c.Spec.Owner.StatefulSet != nil {
		_, err := n.cfg.Clients.Claims.Update(ctx, c, metav1.UpdateOptions{})
		return err
	}
	return n.deleteClaim(ctx, c)
}

// deleteClaim deletes c as it was read: not if it changed since.
func (n *Node) deleteClaim(ctx context.Context, c *v1alpha1.ExternalIPClaim) error {
	uid, rv := c.UID, c.ResourceVersion
	err := n.cfg.Clients.Claims.Delete(ctx, c.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: (*types.UID)(&uid), ResourceVersion: &rv}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
