package claims

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// podKey names one incarnation of a pod: a new pod of the same name is
// another key, never annotated with what the old one held.
type podKey struct{ namespace, name, uid string }

// repairAnnotations writes external-ip/assigned again on every pod of this
// node whose annotation does not say the IPs its claims give it here. The
// write follows the plugin's answer off the CNI call's path, so a node
// process that stops in between (a DaemonSet rollout) loses it, and no
// other write would ever make it again. A pod with no annotation is
// annotated at once (that lost write); one whose annotation names other
// IPs only when the previous pass saw the same difference, so that a
// cache that has not yet seen a release or a claim is not written in.
func (n *Node) repairAnnotations() {
	n.repairMu.Lock()
	defer n.repairMu.Unlock()
	seen := map[podKey]string{}
	for key, addrs := range n.heldByPod() {
		pod, err := n.local.Core().V1().Pods().Lister().Pods(key.namespace).Get(key.name)
		if err != nil || string(pod.UID) != key.uid || pod.DeletionTimestamp != nil {
			continue
		}
		got, ok := pod.Annotations[v1alpha1.AnnotationAssigned]
		want := addrList(addrs)
		if ok && sameAddrs(got, addrs) && pod.Labels[v1alpha1.LabelHolder] == "true" {
			continue
		}
		seen[key] = want
		if ok && n.mismatched[key] != want {
			continue
		}
		n.log.Info("claims: annotating a pod again", "pod", key.namespace+"/"+key.name, "had", got, "holds", want)
		n.annotateLater(nodeapi.Pod{Namespace: key.namespace, Name: key.name, UID: key.uid}, addrs)
	}
	n.mismatched = seen
}

// heldByPod are the IPs each pod holds on this node, by the claims cache,
// IPv4 first, each sorted.
func (n *Node) heldByPod() map[podKey][]netip.Addr {
	out := map[podKey][]netip.Addr{}
	for _, c := range n.byIndex(byNode, n.cfg.NodeName) {
		ip, err := netip.ParseAddr(c.Spec.Address)
		if err != nil {
			continue
		}
		for _, h := range c.Spec.Holders {
			k := podKey{c.Spec.Owner.Namespace, h.Pod, h.PodUID}
			if h.Node == n.cfg.NodeName && !isPending(h) && !slices.Contains(out[k], ip) {
				out[k] = append(out[k], ip)
			}
		}
	}
	for _, addrs := range out {
		slices.SortFunc(addrs, netip.Addr.Compare)
	}
	return out
}

// sameAddrs says whether the annotation names exactly addrs, in any order.
func sameAddrs(annotation string, addrs []netip.Addr) bool {
	var got []netip.Addr
	for _, s := range strings.Split(annotation, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return false
		}
		got = append(got, a)
	}
	slices.SortFunc(got, netip.Addr.Compare)
	return slices.Equal(got, addrs)
}

// withHeld is addrs with the other IPs the pod holds on this node, sorted
// as the repair writes them.
func (n *Node) withHeld(p nodeapi.Pod, addrs []netip.Addr) []netip.Addr {
	out := slices.Clone(addrs)
	for _, ip := range n.heldByPod()[podKey{p.Namespace, p.Name, p.UID}] {
		if !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
