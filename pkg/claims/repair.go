package claims

import (
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// podKey names one incarnation of a pod: a new pod of the same name is
// another key, never annotated with what the old one held.
type podKey struct{ namespace, name, uid string }

// repair writes external-ip/assigned again on every pod of this node
// whose annotation does not say the IPs its claims give it here, and
// takes it off a pod that holds none here (its sandbox deleted, its next
// ADD refused: the IP it named may be another pod's by now). The write
// follows the plugin's answer off the CNI call's path, so a node process
// that stops in between (a DaemonSet rollout) loses it, and no other
// write would ever make it again. A pod with no annotation is annotated
// at once (that lost write); one whose annotation names other IPs, or
// none, only when the previous pass saw the same difference, so that a
// cache that has not yet seen a release or a claim is not written in.
func (an *annotations) repair() {
	an.mu.Lock()
	defer an.mu.Unlock()
	pods, err := an.n.local.Core().V1().Pods().Lister().List(labels.Everything())
	if err != nil {
		return
	}
	held := an.heldByPod()
	seen := map[podKey]string{}
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil {
			an.repairOne(pod, held[podKey{pod.Namespace, pod.Name, string(pod.UID)}], seen)
		}
	}
	an.mismatched = seen
}

// repairOne queues pod's annotation when it does not say addrs, the IPs
// the pod holds here; seen gathers this pass's differences.
func (an *annotations) repairOne(pod *corev1.Pod, addrs []netip.Addr, seen map[podKey]string) {
	key := podKey{pod.Namespace, pod.Name, string(pod.UID)}
	got, annotated := pod.Annotations[v1alpha1.AnnotationAssigned]
	switch {
	case len(addrs) == 0 && !annotated:
		return // holds nothing here, says nothing
	case len(addrs) > 0 && annotated && sameAddrs(got, addrs) && pod.Labels[v1alpha1.LabelHolder] == "true":
		return
	}
	want := addrList(addrs)
	seen[key] = want
	if before, had := an.mismatched[key]; annotated && (!had || before != want) {
		return
	}
	an.n.log.Info("claims: annotating a pod again", "pod", key.namespace+"/"+key.name, "had", got, "holds", want)
	an.later(nodeapi.Pod{Namespace: key.namespace, Name: key.name, UID: key.uid}, addrs)
}

// heldByPod are the IPs each pod holds on this node, by the claims cache,
// IPv4 first, each sorted.
func (an *annotations) heldByPod() map[podKey][]netip.Addr {
	n := an.n
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
func (an *annotations) withHeld(p nodeapi.Pod, addrs []netip.Addr) []netip.Addr {
	out := slices.Clone(addrs)
	for _, ip := range an.heldByPod()[podKey{p.Namespace, p.Name, p.UID}] {
		if !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
