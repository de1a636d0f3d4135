package claims

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/claims/trimmed"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

func TestMain(m *testing.M) {
	// client-go's leader election logs through klog; the node process
	// sends it to its own log, the tests to nowhere.
	klog.SetLogger(klog.Background().WithSink(nil))
	klog.LogToStderr(false)
	os.Exit(m.Run())
}

func fast(c *Config) { c.SweepEvery, c.LocalEvery = 50*time.Millisecond, 50*time.Millisecond }

func TestTheLeaderReleasesTheClaimOfAPodThatIsGoneAndNeverOfOneThatExists(t *testing.T) {
	gone, alive, renamed := pod("a", "gone", "n1"), pod("a", "alive", "n1"), pod("a", "renamed", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), gone, alive, renamed,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	want := map[string]string{}
	for _, p := range []*corev1.Pod{gone, alive, renamed} {
		r := n.claimFor(t, p, "s", "p")
		want[p.Name] = v1alpha1.ClaimName(r.Addresses[0])
	}
	// Node n1 is down: its pods are deleted from the API, no DEL runs. A
	// pod of the same name comes back with another UID.
	n.stop()
	api.Kube.CoreV1().Pods("a").Delete(context.Background(), "gone", metav1.DeleteOptions{})
	api.Kube.CoreV1().Pods("a").Delete(context.Background(), "renamed", metav1.DeleteOptions{})
	again := pod("a", "renamed", "n2")
	again.UID = types.UID("another")
	api.Kube.CoreV1().Pods("a").Create(context.Background(), again, metav1.CreateOptions{})
	// Another node's process leads and sweeps.
	startNode(t, api, "n2", fast)
	waitFor(t, "the claims of the gone pods released", func() bool {
		all := claimsNow(t, api)
		return all[want["gone"]] == nil && all[want["renamed"]] == nil
	})
	time.Sleep(200 * time.Millisecond) // a few more sweeps
	if c := claimsNow(t, api)[want["alive"]]; c == nil || len(c.Spec.Holders) != 1 {
		t.Errorf("the claim of a pod that exists was released: %+v", c)
	}
}

func TestAStatefulSetsClaimGoesWhenItShrinksBelowTheOrdinalOrIsDeleted(t *testing.T) {
	set := statefulSet("a", "db", 3)
	p1, p2 := setPod(set, 1, "n1", "x"), setPod(set, 2, "n1", "x")
	api := claimstest.New(namespace("a", nil), node("n1", nil), set, p1, p2,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1", fast)
	ip1, ip2 := n.claimFor(t, p1, "s", "p").Addresses[0], n.claimFor(t, p2, "s", "p").Addresses[0]
	n.release(t, p1, "s")
	n.release(t, p2, "s")
	time.Sleep(200 * time.Millisecond)
	if all := claimsNow(t, api); all[v1alpha1.ClaimName(ip1)] == nil || all[v1alpha1.ClaimName(ip2)] == nil {
		t.Fatalf("ordinals 1 and 2 of a StatefulSet of 3 lost their IPs between pods: %v", all)
	}
	two := int32(2)
	set.Spec.Replicas = &two
	api.Kube.AppsV1().StatefulSets("a").Update(context.Background(), set, metav1.UpdateOptions{})
	waitFor(t, "ordinal 2's claim released", func() bool { return claimsNow(t, api)[v1alpha1.ClaimName(ip2)] == nil })
	if claimsNow(t, api)[v1alpha1.ClaimName(ip1)] == nil {
		t.Fatal("ordinal 1's claim went with ordinal 2's")
	}
	api.Kube.AppsV1().StatefulSets("a").Delete(context.Background(), "db", metav1.DeleteOptions{})
	waitFor(t, "ordinal 1's claim released with the StatefulSet", func() bool { return claimsNow(t, api)[v1alpha1.ClaimName(ip1)] == nil })
}

// A StatefulSet deleted with its pods orphaned and made again under its
// name (to change a field that cannot be changed) adopts the pods: its
// ordinals keep their IPs, also when a pod restarts after.
func TestAStatefulSetMadeAgainUnderItsNameKeepsItsOrdinalsIPs(t *testing.T) {
	old := statefulSet("a", "db", 1)
	first := setPod(old, 0, "n1", "x")
	api := claimstest.New(namespace("a", nil), node("n1", nil), old, first,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1", fast)
	ip := n.claimFor(t, first, "s", "p").Addresses[0]
	ctx := context.Background()
	if err := api.Kube.AppsV1().StatefulSets("a").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := statefulSet("a", "db", 1)
	again.UID = "uid-sts-db-again"
	if _, err := api.Kube.AppsV1().StatefulSets("a").Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first.OwnerReferences[0].UID = again.UID // adopted
	if _, err := api.Kube.CoreV1().Pods("a").Update(ctx, first, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod restarts: its DEL, and a new pod of the ordinal.
	n.release(t, first, "s")
	if err := api.Kube.CoreV1().Pods("a").Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := setPod(again, 0, "n1", "y")
	if _, err := api.Kube.CoreV1().Pods("a").Create(ctx, next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim nobody holds kept, naming the StatefulSet made again", func() bool {
		c := claimsNow(t, api)[v1alpha1.ClaimName(ip)]
		return c != nil && c.Spec.Owner.StatefulSet.UID == string(again.UID)
	})
	if got := n.claimFor(t, next, "s", "p").Addresses; len(got) != 1 || got[0] != ip {
		t.Fatalf("the ordinal's next pod got %v, want its IP %v", got, ip)
	}
}

func TestAHolderWhoseAttachmentTheNodeDoesNotHaveIsDroppedAndADeferredReleaseCarriedOut(t *testing.T) {
	a, b := pod("a", "a", "n1"), pod("a", "b", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), a, b,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1", fast)
	ra, rb := n.claimFor(t, a, "s", "p"), n.claimFor(t, b, "s", "p")
	// a's reply was lost: the plugin failed the ADD and its DEL forgot the
	// intent. b's DEL could not reach the node process and deferred it.
	nodeapi.Forget(n.dir, attachment(a, "s"))
	nodeapi.Defer(n.dir, attachment(b, "s"))
	waitFor(t, "both claims released", func() bool {
		all := claimsNow(t, api)
		return all[v1alpha1.ClaimName(ra.Addresses[0])] == nil && all[v1alpha1.ClaimName(rb.Addresses[0])] == nil
	})
	waitFor(t, "the deferred release removed", func() bool { d, _ := nodeapi.Deferred(n.dir); return len(d) == 0 })
}

func TestTheLeaderWritesEachPoolsCountsAndTheAdmissionPolicysView(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("small", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}),
		pool("late", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.4-192.0.2.5")}))
	n := startNode(t, api, "n1", fast)
	n.claimFor(t, p, "s", "small")
	status := func(name string) v1alpha1.ExternalIPPoolStatus {
		o, err := api.Tracker.Get(v1alpha1.Pools, "", name)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*v1alpha1.ExternalIPPool).Status
	}
	waitFor(t, "small's status", func() bool { s := status("small"); return s.Size == 6 && s.Used == 1 && s.Free == 5 })
	ready := status("small").Conditions
	if len(ready) != 1 || ready[0].Status != metav1.ConditionTrue {
		t.Errorf("small's conditions %+v", ready)
	}
	// Both pools were made in the same second: "late" sorts after "small"?
	// No: by name, "late" is older. Whichever is refused says why.
	var refused v1alpha1.ExternalIPPoolStatus
	waitFor(t, "a Ready=False on one of the overlapping pools", func() bool {
		for _, name := range []string{"small", "late"} {
			if s := status(name); len(s.Conditions) == 1 && s.Conditions[0].Status == metav1.ConditionFalse {
				refused = s
				return true
			}
		}
		return false
	})
	if c := refused.Conditions[0]; c.Reason != "Overlaps" || c.Message == "" {
		t.Errorf("the refused pool's condition: %+v", c)
	}
	waitFor(t, "the policy's ConfigMap", func() bool {
		cm, err := api.Kube.CoreV1().ConfigMaps("external-ip").Get(context.Background(), PolicyParams, metav1.GetOptions{})
		return err == nil && cm.Data["small"] == "4192.000.002.000-4192.000.002.007" && cm.Data["late"] != ""
	})
}

func TestTwoNodesJoiningOneNamedIPAtOnceBothHoldIt(t *testing.T) {
	var objs []*corev1.Pod
	api := claimstest.New(namespace("a", nil), node("n1", nil), node("n2", nil),
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	for i := range 20 {
		p := pod("a", fmt.Sprintf("p%d", i), fmt.Sprintf("n%d", i%2+1))
		api.Kube.CoreV1().Pods("a").Create(context.Background(), p, metav1.CreateOptions{})
		objs = append(objs, p)
	}
	nodes := map[string]*testNode{"n1": startNode(t, api, "n1"), "n2": startNode(t, api, "n2")}
	var wg sync.WaitGroup
	for _, p := range objs {
		wg.Go(func() {
			if r := nodes[p.Spec.NodeName].claimFor(t, p, "s", "", "192.0.2.77"); addrsOf(r) != "192.0.2.77" {
				t.Errorf("%s: %+v", p.Name, r)
			}
		})
	}
	wg.Wait()
	if c := claimsNow(t, api)["192.0.2.77"]; c == nil || len(c.Spec.Holders) != 20 {
		t.Fatalf("the claim: %+v; want 20 holders (an update lost to a conflict was not tried again)", c)
	}
	for _, p := range objs {
		wg.Go(func() {
			n := nodes[p.Spec.NodeName]
			a := attachment(p, "s")
			if r := n.Handle(context.Background(), nodeapi.Request{Op: nodeapi.OpRelease, Attachment: a}); r.Unavailable != "" || r.Reason != "" {
				t.Errorf("release of %s: %+v", p.Name, r)
			}
		})
	}
	wg.Wait()
	if c := claimsNow(t, api)["192.0.2.77"]; c != nil {
		t.Errorf("after every release: %+v", c)
	}
}

// The e2e recipe makes 1,000 cycles against a real API server
// (test/e2e/claims.sh); here 200, in four racing workers.
func TestClaimAndReleaseCyclesLeaveNoClaim(t *testing.T) {
	api := claimstest.New(namespace("a", nil), node("n1", nil),
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/28", "2001:db8::/124"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				p := pod("a", fmt.Sprintf("w%d-%d", w, i), "n1")
				api.Kube.CoreV1().Pods("a").Create(context.Background(), p, metav1.CreateOptions{})
				if r := n.claimFor(t, p, "s", "p"); len(r.Addresses) != 2 && r.Reason != nodeapi.ReasonPoolExhausted {
					t.Errorf("%s: %+v", p.Name, r)
				}
				n.release(t, p, "s")
				api.Kube.CoreV1().Pods("a").Delete(context.Background(), p.Name, metav1.DeleteOptions{})
			}
		})
	}
	wg.Wait()
	if all := claimsNow(t, api); len(all) != 0 {
		t.Errorf("%d claims left after 200 cycles: %v", len(all), all)
	}
}

func TestAClaimForAnAttachmentWhoseReleaseWasDeferredReleasesFirstAndKeepsTheNewClaim(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	if r := n.claimFor(t, p, "s", "p"); len(r.Addresses) != 1 {
		t.Fatalf("%+v", r)
	}
	// The DEL could not reach the node process; the runtime reuses the
	// container ID for its next ADD.
	if err := nodeapi.Defer(n.dir, attachment(p, "s")); err != nil {
		t.Fatal(err)
	}
	second := n.claimFor(t, p, "s", "p", "192.0.2.200")
	if len(second.Addresses) != 2 {
		t.Fatalf("the second ADD got %+v", second)
	}
	if d, _ := nodeapi.Deferred(n.dir); len(d) != 0 {
		t.Errorf("the deferred release is still there: %v", d)
	}
	n.carryOutDeferred(context.Background())
	all := claimsNow(t, api)
	for _, ip := range second.Addresses {
		if c := all[v1alpha1.ClaimName(ip)]; c == nil || len(c.Spec.Holders) != 1 {
			t.Errorf("claim of %s after the deferred releases ran: %+v; the second ADD's claims must stay", ip, c)
		}
	}
	if len(all) != 2 {
		t.Errorf("%d claims; want the second ADD's 2 only (the first's released by its DEL)", len(all))
	}
}

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
