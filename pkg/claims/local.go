package claims

import (
	"context"
	"time"

	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/pools"
	"github.com/external-ip/external-ip/pkg/store"
)

// localLoop keeps this node's claims as its attachments are: now, then
// every LocalEvery.
func (n *Node) localLoop(ctx context.Context) {
	t := time.NewTicker(n.cfg.LocalEvery)
	defer t.Stop()
	for {
		n.carryOutDeferred(ctx)
		n.dropStrayHolders(ctx)
		n.early.settle(ctx)
		n.notes.repair()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// carryOutDeferred carries out the releases that DELs deferred while this
// process was not there to hear them.
func (n *Node) carryOutDeferred(ctx context.Context) {
	deferred, err := nodeapi.Deferred(n.cfg.DataDir)
	if err != nil {
		n.log.Error("claims: reading deferred releases", "error", err)
		return
	}
	for _, m := range deferred {
		// Under the attachment's lock, settleDeferred looks again: a claim
		// of the same attachment may have carried it out meanwhile, and
		// this listing must not then take that claim's IPs.
		unlock, err := n.locks.LockContext(ctx, attachmentKey(m.Attachment))
		if err != nil {
			return // the node stops
		}
		var resp *nodeapi.Response
		apiclient.Bounded(ctx, nodeapi.ClaimTimeout, func(ctx context.Context) { resp = n.settleDeferred(ctx, m.Attachment) })
		unlock()
		if resp != nil {
			n.log.Warn("claims: a deferred release waits", "attachment", m.Attachment.String(), "why", resp.Unavailable)
			return
		}
		n.log.Info("claims: deferred release carried out", "attachment", m.Attachment.String(), "pod", m.Pod.Namespace+"/"+m.Pod.Name)
	}
}

// settleDeferred carries out the attachment's deferred release before it
// claims again (a runtime that reuses a container ID after a DEL the node
// process missed): done later, the release would take the new claims.
// The caller holds the attachment's lock.
func (n *Node) settleDeferred(ctx context.Context, a store.Attachment) *nodeapi.Response {
	pending, err := nodeapi.IsDeferred(n.cfg.DataDir, a)
	if err != nil || !pending {
		return nil
	}
	for _, name := range n.held(a) {
		if err := n.removeHolder(ctx, name, a); err != nil {
			r := unavailable("releasing claim %s of the attachment's earlier DEL: %v", name, err)
			return &r
		}
	}
	n.forgetRecent(a)
	if err := nodeapi.Released(n.cfg.DataDir, a); err != nil {
		n.log.Error("claims: removing a deferred release", "attachment", a.String(), "error", err)
	}
	return nil
}

// dropStrayHolders takes off its claims every holder on this node whose
// attachment has no intent: one whose claim's answer was lost on the way
// (the plugin failed the ADD, the DEL found nothing to release), or whose
// DEL released it while the cache had not yet seen the claim. The claims
// are read before the intents: an attachment writes its intent before it
// asks, so a holder seen first has its intent seen after, unless released.
func (n *Node) dropStrayHolders(ctx context.Context) {
	holders := map[store.Attachment][]string{}
	for _, c := range n.byIndex(byNode, n.cfg.NodeName) {
		for _, h := range c.Spec.Holders {
			if h.Node == n.cfg.NodeName && !isPending(h) { // the early claims' settle
				holders[holderAttachment(h)] = append(holders[holderAttachment(h)], c.Name)
			}
		}
	}
	if len(holders) == 0 {
		return
	}
	intents, err := nodeapi.Intents(n.cfg.DataDir)
	if err != nil {
		n.log.Error("claims: reading intents", "error", err)
		return
	}
	for _, m := range intents {
		delete(holders, m.Attachment)
	}
	for a, names := range holders {
		apiclient.Bounded(ctx, nodeapi.ClaimTimeout, func(ctx context.Context) { n.dropStray(ctx, a, names) })
	}
}

func (n *Node) dropStray(ctx context.Context, a store.Attachment, names []string) {
	unlock, err := n.locks.LockContext(ctx, attachmentKey(a))
	if err != nil {
		return // the node stops
	}
	defer unlock()
	if has, err := nodeapi.HasIntent(n.cfg.DataDir, a); has || err != nil {
		return // asked again meanwhile
	}
	for _, name := range names {
		if err := n.removeHolder(ctx, name, a); err != nil {
			n.log.Warn("claims: dropping a holder with no attachment", "claim", name, "attachment", a.String(), "error", err)
			continue
		}
		n.log.Info("claims: dropped a holder whose attachment this node does not have", "claim", name, "attachment", a.String())
	}
	n.forgetRecent(a)
}

// publish tells the plugin whether the cluster has pools, and how those
// that say so and admit this node hold their IPs: STATUS checks only
// those, so that a pool held otherwise on a few nodes does not make every
// other node's network not ready. The Node's cached labels decide; the
// file follows them (nodeInformer).
func (n *Node) publish(set *pools.Set) {
	labels, _ := n.cachedNodeLabels()
	var pub nodeapi.Pools
	for _, p := range set.All() {
		hold := p.Obj.Spec.Hold
		if !p.AdmitsNode(labels) {
			hold = ""
		}
		pub.Add(p.Name(), hold, p.Ranges.Families())
	}
	if err := nodeapi.Publish(n.cfg.DataDir, pub); err != nil {
		n.log.Error("claims: publishing the pools to the plugin", "error", err)
	}
}
