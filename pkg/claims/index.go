package claims

import (
	"fmt"
	"net/netip"
	"strconv"

	"k8s.io/client-go/tools/cache"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/pools"
	"github.com/external-ip/external-ip/pkg/store"
)

// The indexes of the claims cache: what a request looks claims up by,
// each in O(1), never by listing every claim.
const (
	byPoolFamily = "poolFamily" // "pool/4": the claims a pool has given, by family
	byOwner      = "owner"      // the pod, or StatefulSet ordinal, a pool request drew for
	byAttachment = "attachment" // each holder's attachment
	byNode       = "node"       // each holder's node
)

var claimIndexers = cache.Indexers{
	byPoolFamily: func(o any) ([]string, error) {
		c := o.(*v1alpha1.ExternalIPClaim)
		ip, err := netip.ParseAddr(c.Spec.Address)
		if err != nil {
			return nil, nil
		}
		return []string{poolFamilyKey(c.Spec.Pool, pools.FamilyOf(ip))}, nil
	},
	byOwner: func(o any) ([]string, error) {
		c := o.(*v1alpha1.ExternalIPClaim)
		if k := ownerKey(c.Spec.Owner); k != "" {
			return []string{k}, nil
		}
		return nil, nil
	},
	byAttachment: func(o any) ([]string, error) {
		var out []string
		for _, h := range o.(*v1alpha1.ExternalIPClaim).Spec.Holders {
			if !isPending(h) { // a pending holder has no attachment yet
				out = append(out, attachmentKey(holderAttachment(h)))
			}
		}
		return out, nil
	},
	byNode: func(o any) ([]string, error) {
		var out []string
		for _, h := range o.(*v1alpha1.ExternalIPClaim).Spec.Holders {
			out = append(out, h.Node)
		}
		return out, nil
	},
}

func poolFamilyKey(pool string, f pools.Family) string {
	return pool + "/" + map[pools.Family]string{pools.IPv4: "4", pools.IPv6: "6"}[f]
}

// ownerKey is the key of whom a pool request drew for: a StatefulSet's
// ordinal (whichever pod has it now), or a pod by its UID; "" for an IP
// that a namespace named.
func ownerKey(o v1alpha1.ClaimOwner) string {
	switch {
	case o.StatefulSet != nil:
		return "sts/" + o.Namespace + "/" + o.StatefulSet.Name + "/" + strconv.Itoa(int(o.StatefulSet.Ordinal))
	case o.Pod != nil:
		return "pod/" + o.Namespace + "/" + o.Pod.UID
	}
	return ""
}

func attachmentKey(a store.Attachment) string {
	return fmt.Sprintf("%s/%s/%s", a.Network, a.ContainerID, a.IfName)
}

func holderAttachment(h v1alpha1.ClaimHolder) store.Attachment {
	return store.Attachment{Network: h.Network, ContainerID: h.ContainerID, IfName: h.IfName}
}

// byIndex are the cached claims under one index key.
func (n *Node) byIndex(index, key string) []*v1alpha1.ExternalIPClaim {
	objs, _ := n.claims.GetIndexer().ByIndex(index, key)
	out := make([]*v1alpha1.ExternalIPClaim, len(objs))
	for i, o := range objs {
		out[i] = o.(*v1alpha1.ExternalIPClaim)
	}
	return out
}

// cached is the cached claim of ip, nil when there is none.
func (n *Node) cached(ip netip.Addr) *v1alpha1.ExternalIPClaim {
	o, ok, _ := n.claims.GetStore().GetByKey(v1alpha1.ClaimName(ip))
	if !ok {
		return nil
	}
	return o.(*v1alpha1.ExternalIPClaim)
}

// given is how many claims of family f name the pool, inside its ranges
// or not: used's bound from above, in O(1).
func (n *Node) given(pool string, f pools.Family) int {
	keys, _ := n.claims.GetIndexer().IndexKeys(byPoolFamily, poolFamilyKey(pool, f))
	return len(keys)
}

// used is how many IPs of family f inside its ranges the pool has given.
// A claim that an edit of the ranges left outside them is not the pool's
// to count: it would make Used exceed Size, and the pool look exhausted
// with IPs free. It stays until its holders go (package leader).
func (n *Node) used(p *pools.Pool, f pools.Family) int {
	keys, _ := n.claims.GetIndexer().IndexKeys(byPoolFamily, poolFamilyKey(p.Name(), f))
	k := 0
	for _, name := range keys {
		if ip, err := v1alpha1.ParseClaimName(name); err == nil && p.Ranges.Covers(ip) {
			k++
		}
	}
	return k
}

// PoolCounts are every pool's numbers as this node's cache has them: the
// metrics' and, on the leader, the pools' status.
func (n *Node) PoolCounts() []pools.Count {
	var out []pools.Count
	for _, p := range n.set.Load().All() {
		c := pools.Count{Pool: p.Name()}
		if p.Ranges != nil {
			c.Size = p.Ranges.Total()
		}
		c.Used = int64(n.used(p, pools.IPv4) + n.used(p, pools.IPv6))
		out = append(out, c)
	}
	return out
}
