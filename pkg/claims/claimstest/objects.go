package claimstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/store"
)

// The objects the tests of package claims and of its leader put in the
// fake server, made alike in both.

// Pool is a pool made now.
func Pool(name string, spec v1alpha1.ExternalIPPoolSpec) *v1alpha1.ExternalIPPool {
	return &v1alpha1.ExternalIPPool{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Now()}, Spec: spec}
}

// Ranges are a pool's ranges.
func Ranges(r ...string) []v1alpha1.Range {
	out := make([]v1alpha1.Range, len(r))
	for i, s := range r {
		out[i] = v1alpha1.Range(s)
	}
	return out
}

// EveryNamespace is a namespace selector that selects every namespace.
func EveryNamespace() *metav1.LabelSelector { return &metav1.LabelSelector{} }

func Namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func Node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// Pod is a pod on nodeName, of UID "uid-<ns>-<name>".
func Pod(ns, name, nodeName string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: corev1.PodSpec{NodeName: nodeName}}
}

// StatefulSet is a StatefulSet of UID "uid-sts-<name>".
func StatefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-sts-" + name)},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas}}
}

// SetPod is pod ordinal of set, with a UID of its own (each incarnation).
func SetPod(set *appsv1.StatefulSet, ordinal int, nodeName, incarnation string) *corev1.Pod {
	p := Pod(set.Namespace, fmt.Sprintf("%s-%d", set.Name, ordinal), nodeName)
	p.UID = types.UID(string(p.UID) + "-" + incarnation)
	p.Labels = map[string]string{appsv1.PodIndexLabel: fmt.Sprint(ordinal)}
	controller := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set.Name, UID: set.UID, Controller: &controller}}
	return p
}

// Attachment is the attachment of p's sandbox (one per container ID).
func Attachment(p *corev1.Pod, sandbox string) store.Attachment {
	return store.Attachment{Network: "pods", ContainerID: string(p.UID) + "-" + sandbox, IfName: "eth0"}
}

// WaitFor waits up to 10 s for ok, failing the test after.
func WaitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ClaimsNow are the claims on the server, name -> claim.
func (a *API) ClaimsNow(t testing.TB) map[string]*v1alpha1.ExternalIPClaim {
	t.Helper()
	l, err := a.Claims.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*v1alpha1.ExternalIPClaim{}
	for i := range l.Items {
		out[l.Items[i].Name] = &l.Items[i]
	}
	return out
}

// MuteKlog sends klog's lines nowhere: client-go's leader election logs
// through it, which the node process sends to its own log and a test to
// nowhere. For a TestMain, before the tests run.
func MuteKlog() {
	klog.SetLogger(klog.Background().WithSink(nil))
	klog.LogToStderr(false)
}

// SetRanges edits a pool's spec.ranges, as its owner would.
func (a *API) SetRanges(t testing.TB, pool string, ranges ...string) {
	t.Helper()
	p, err := a.Pools.Get(context.Background(), pool, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Ranges = Ranges(ranges...)
	if _, err := a.Pools.Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
