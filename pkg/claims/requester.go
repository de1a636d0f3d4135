package claims

import (
	"context"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// requester is the pod that asks, as the API server knows it.
type requester struct {
	pod      nodeapi.Pod
	nsLabels map[string]string
	// sts is the StatefulSet ordinal the pod is, nil for any other pod.
	sts *v1alpha1.StatefulSetRef
}

// poolOwner is whom a pool request draws for: the StatefulSet's ordinal,
// so that its next pod gets the IP again, or the pod itself.
func (r *requester) poolOwner() v1alpha1.ClaimOwner {
	if r.sts != nil {
		return v1alpha1.ClaimOwner{Namespace: r.pod.Namespace, StatefulSet: r.sts}
	}
	return v1alpha1.ClaimOwner{Namespace: r.pod.Namespace, Pod: &v1alpha1.PodRef{Name: r.pod.Name, UID: r.pod.UID}}
}

// requester reads the asking pod and its namespace: from this node's
// caches, else from the server. A pod whose UID is not the runtime's is
// refused: the sandbox belongs to a pod that is gone.
func (n *Node) requester(ctx context.Context, p nodeapi.Pod) (*requester, *nodeapi.Response) {
	pod, err := n.podOf(ctx, p)
	if apierrors.IsNotFound(err) || (err == nil && string(pod.UID) != p.UID) {
		r := refuse(nodeapi.ReasonNoPodIdentity, "pod %s/%s with UID %s: not in the cluster (deleted meanwhile?)", p.Namespace, p.Name, p.UID)
		return nil, &r
	}
	if err != nil {
		r := unavailable("reading pod %s/%s: %v", p.Namespace, p.Name, err)
		return nil, &r
	}
	labels, err := n.namespaceLabels(ctx, p.Namespace)
	if err != nil {
		r := unavailable("reading namespace %s: %v", p.Namespace, err)
		return nil, &r
	}
	return &requester{pod: p, nsLabels: labels, sts: statefulSetOf(pod)}, nil
}

func (n *Node) podOf(ctx context.Context, p nodeapi.Pod) (*corev1.Pod, error) {
	pod, err := n.local.Core().V1().Pods().Lister().Pods(p.Namespace).Get(p.Name)
	if err == nil && string(pod.UID) == p.UID {
		return pod, nil
	}
	return n.cfg.Clients.Kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
}

func (n *Node) namespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	ns, err := n.kube.Core().V1().Namespaces().Lister().Get(name)
	if err != nil {
		ns, err = n.cfg.Clients.Kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, err
	}
	return ns.Labels, nil
}

// nodeLabels are this node's labels; a node not yet cached has none, which
// a pool without nodeSelector admits and one with it does not.
func (n *Node) nodeLabels(ctx context.Context) map[string]string {
	if labels, ok := n.cachedNodeLabels(); ok {
		return labels
	}
	node, err := n.cfg.Clients.Kube.CoreV1().Nodes().Get(ctx, n.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		n.log.Warn("claims: reading this node's labels", "node", n.cfg.NodeName, "error", err)
		return nil
	}
	return node.Labels
}

// statefulSetOf is the StatefulSet and ordinal a pod is, nil when its
// controller is not a StatefulSet. The ordinal is the pod-index label
// (Kubernetes 1.28 on), else the name's last part, as the StatefulSet
// controller names its pods NAME-ORDINAL.
func statefulSetOf(pod *corev1.Pod) *v1alpha1.StatefulSetRef {
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "StatefulSet" || ref.APIVersion != appsv1.SchemeGroupVersion.String() {
		return nil
	}
	ord, ok := pod.Labels[appsv1.PodIndexLabel]
	if !ok {
		ord, ok = strings.CutPrefix(pod.Name, ref.Name+"-")
	}
	i, err := strconv.ParseInt(ord, 10, 32)
	if !ok || err != nil || i < 0 {
		return nil
	}
	return &v1alpha1.StatefulSetRef{Name: ref.Name, UID: string(ref.UID), Ordinal: int32(i)}
}

// cachedNodeLabels are this node's labels as its informer has them; ok is
// false before it has the Node.
func (n *Node) cachedNodeLabels() (labels map[string]string, ok bool) {
	o, ok, _ := n.local.InformerFor(&corev1.Node{}, nil).GetStore().GetByKey(n.cfg.NodeName)
	if !ok {
		return nil, false
	}
	return o.(*corev1.Node).Labels, true
}
