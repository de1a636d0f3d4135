package trimmed

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
)

// Holders watches the pods labelled as holding a claim, each cached as
// podMetadataOnly keeps it.
func Holders(kube kubernetes.Interface) (informers.SharedInformerFactory, cache.SharedIndexInformer) {
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{v1alpha1.LabelHolder: "true"}.String()
		}),
		informers.WithTransform(podMetadataOnly))
	return f, f.Core().V1().Pods().Informer()
}

// StatefulSets watches every StatefulSet of the cluster, each cached as
// statefulSetOrdinalsOnly keeps it.
func StatefulSets(kube kubernetes.Interface) (informers.SharedInformerFactory, cache.SharedIndexInformer) {
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(statefulSetOrdinalsOnly))
	return f, f.Apps().V1().StatefulSets().Informer()
}

// podMetadataOnly keeps what the leader reads of a pod: who it is.
func podMetadataOnly(o any) (any, error) {
	if p, ok := o.(*corev1.Pod); ok {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
			ResourceVersion: p.ResourceVersion, Labels: p.Labels}}, nil
	}
	return o, nil
}

// statefulSetOrdinalsOnly keeps what the leader reads of a StatefulSet
// (claims' ordinalWanted, followStatefulSet): who it is, and its
// ordinals' range.
func statefulSetOrdinalsOnly(o any) (any, error) {
	if s, ok := o.(*appsv1.StatefulSet); ok {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: s.UID,
			ResourceVersion: s.ResourceVersion}, Spec: appsv1.StatefulSetSpec{Replicas: s.Spec.Replicas, Ordinals: s.Spec.Ordinals}}, nil
	}
	return o, nil
}
