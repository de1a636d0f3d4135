package claims

import (
	"context"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/leader"
	"github.com/external-ip/external-ip/pkg/pools"
)

// forLeader is the node as the leader sees it (leader.Node): its caches
// and its writes, and nothing of its answers to the plugin.
type forLeader struct{ n *Node }

var _ leader.Node = forLeader{}

func (f forLeader) Claims() cache.SharedIndexInformer { return f.n.claims }
func (f forLeader) Pools() cache.SharedIndexInformer  { return f.n.pools }
func (f forLeader) Set() *pools.Set                   { return f.n.set.Load() }
func (f forLeader) Counts() []pools.Count             { return f.n.PoolCounts() }
func (f forLeader) Events() record.EventRecorder      { return f.n.events }

func (f forLeader) Update(ctx context.Context, name string, change func(*v1alpha1.ExternalIPClaim) bool) error {
	return f.n.update(ctx, name, change)
}

func (f forLeader) RemoveHolder(ctx context.Context, name string, h v1alpha1.ClaimHolder) error {
	return f.n.removeHolder(ctx, name, holderAttachment(h))
}

func (f forLeader) DeleteClaim(ctx context.Context, c *v1alpha1.ExternalIPClaim) error {
	return f.n.deleteClaim(ctx, c)
}

// lead takes part in the election until ctx ends; the leader.
func (n *Node) lead(ctx context.Context) {
	leader.Run(ctx, leader.Config{Clients: n.cfg.Clients, NodeName: n.cfg.NodeName, Namespace: n.cfg.Namespace,
		SweepEvery: n.cfg.SweepEvery, Log: n.log}, forLeader{n})
}
