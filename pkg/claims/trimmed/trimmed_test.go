package trimmed_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/claims/trimmed"
)

// The leader watches every StatefulSet of the cluster: each is cached with
// only what it reads (who it is, its ordinals' range), not its pod
// template, volume claims and status.
func TestTheLeaderCachesOfAStatefulSetOnlyWhatItReads(t *testing.T) {
	replicas := int32(3)
	full := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db", UID: "uid-sts-db", ResourceVersion: "7", Generation: 2,
			Labels: map[string]string{"app": "db"}, Annotations: map[string]string{"note": strings.Repeat("x", 4096)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Ordinals: &appsv1.StatefulSetOrdinals{Start: 5}, ServiceName: "db",
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "db:1",
				Env: []corev1.EnvVar{{Name: "BIG", Value: strings.Repeat("y", 4096)}}}}}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"}}}},
		Status: appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3, CurrentRevision: "db-1"},
	}
	f, sets := trimmed.StatefulSets(claimstest.New(full).Kube)
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	defer func() { cancel(); f.Shutdown() }() // Shutdown waits for the informers to stop
	f.WaitForCacheSync(ctx.Done())
	obj, ok, err := sets.GetStore().GetByKey("a/db")
	if !ok || err != nil {
		t.Fatalf("a/db not cached: %v %v", ok, err)
	}
	want := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db", UID: "uid-sts-db", ResourceVersion: "7"},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Ordinals: &appsv1.StatefulSetOrdinals{Start: 5}}}
	if got := obj.(*appsv1.StatefulSet); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("cached %+v\nwant only %+v", got, want)
	}
}
