package leader_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/claims/leader"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

func TestMain(m *testing.M) {
	claimstest.MuteKlog()
	os.Exit(m.Run())
}

// testNode is a node process on the fake server: the leader runs in it,
// as it does in external-ip-node.
type testNode struct {
	*claims.Node
	dir  string
	stop func() // the process ends (its node goes down)
}

// fast sweeps often; the node's own pass stays an hour away, so that
// what a test sees is the leader's doing.
func fast(c *claims.Config) { c.SweepEvery = 50 * time.Millisecond }

func startNode(t *testing.T, api *claimstest.API, name string, tweak ...func(*claims.Config)) *testNode {
	t.Helper()
	cfg := claims.Config{Clients: &apiclient.Clients{Kube: api.Kube, Pools: api.Pools, Claims: api.Claims}, NodeName: name,
		DataDir: t.TempDir(), Namespace: "external-ip", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		LocalEvery: time.Hour, SweepEvery: time.Hour}
	for _, f := range tweak {
		f(&cfg)
	}
	n := claims.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return &testNode{Node: n, dir: cfg.DataDir, stop: stop}
}

// claimFor asks as the plugin's ADD does (its intent marked first), once
// the node's caches are synced.
func (n *testNode) claimFor(t *testing.T, p *corev1.Pod, sandbox, pool string) nodeapi.Response {
	t.Helper()
	req := nodeapi.Request{Op: nodeapi.OpClaim, Attachment: claimstest.Attachment(p, sandbox), Pool: pool,
		Pod: nodeapi.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}}
	if err := nodeapi.MarkIntent(n.dir, nodeapi.Marker{Attachment: req.Attachment, Pod: req.Pod}); err != nil {
		t.Fatal(err)
	}
	var resp nodeapi.Response
	claimstest.WaitFor(t, "the node's caches synced", func() bool {
		resp = n.Handle(context.Background(), req)
		return resp.Unavailable == ""
	})
	return resp
}

// release releases as the plugin's DEL does.
func (n *testNode) release(t *testing.T, p *corev1.Pod, sandbox string) {
	t.Helper()
	a := claimstest.Attachment(p, sandbox)
	if resp := n.Handle(context.Background(), nodeapi.Request{Op: nodeapi.OpRelease, Attachment: a}); resp.Unavailable != "" || resp.Reason != "" {
		t.Fatalf("release of %s: %+v", a, resp)
	}
	if err := nodeapi.Forget(n.dir, a); err != nil {
		t.Fatal(err)
	}
}

func TestTheLeaderReleasesTheClaimOfAPodThatIsGoneAndNeverOfOneThatExists(t *testing.T) {
	gone, alive, renamed := claimstest.Pod("a", "gone", "n1"), claimstest.Pod("a", "alive", "n1"), claimstest.Pod("a", "renamed", "n1")
	api := claimstest.New(claimstest.Namespace("a", nil), claimstest.Node("n1", nil), gone, alive, renamed,
		claimstest.Pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: claimstest.Ranges("192.0.2.0/24"), NamespaceSelector: claimstest.EveryNamespace()}))
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
	again := claimstest.Pod("a", "renamed", "n2")
	again.UID = types.UID("another")
	api.Kube.CoreV1().Pods("a").Create(context.Background(), again, metav1.CreateOptions{})
	// Another node's process leads and sweeps.
	startNode(t, api, "n2", fast)
	claimstest.WaitFor(t, "the claims of the gone pods released", func() bool {
		all := api.ClaimsNow(t)
		return all[want["gone"]] == nil && all[want["renamed"]] == nil
	})
	time.Sleep(200 * time.Millisecond) // a few more sweeps
	if c := api.ClaimsNow(t)[want["alive"]]; c == nil || len(c.Spec.Holders) != 1 {
		t.Errorf("the claim of a pod that exists was released: %+v", c)
	}
}

func TestAStatefulSetsClaimGoesWhenItShrinksBelowTheOrdinalOrIsDeleted(t *testing.T) {
	set := claimstest.StatefulSet("a", "db", 3)
	p1, p2 := claimstest.SetPod(set, 1, "n1", "x"), claimstest.SetPod(set, 2, "n1", "x")
	api := claimstest.New(claimstest.Namespace("a", nil), claimstest.Node("n1", nil), set, p1, p2,
		claimstest.Pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: claimstest.Ranges("192.0.2.0/24"), NamespaceSelector: claimstest.EveryNamespace()}))
	n := startNode(t, api, "n1", fast)
	ip1, ip2 := n.claimFor(t, p1, "s", "p").Addresses[0], n.claimFor(t, p2, "s", "p").Addresses[0]
	n.release(t, p1, "s")
	n.release(t, p2, "s")
	time.Sleep(200 * time.Millisecond)
	if all := api.ClaimsNow(t); all[v1alpha1.ClaimName(ip1)] == nil || all[v1alpha1.ClaimName(ip2)] == nil {
		t.Fatalf("ordinals 1 and 2 of a StatefulSet of 3 lost their IPs between pods: %v", all)
	}
	two := int32(2)
	set.Spec.Replicas = &two
	api.Kube.AppsV1().StatefulSets("a").Update(context.Background(), set, metav1.UpdateOptions{})
	claimstest.WaitFor(t, "ordinal 2's claim released", func() bool { return api.ClaimsNow(t)[v1alpha1.ClaimName(ip2)] == nil })
	if api.ClaimsNow(t)[v1alpha1.ClaimName(ip1)] == nil {
		t.Fatal("ordinal 1's claim went with ordinal 2's")
	}
	api.Kube.AppsV1().StatefulSets("a").Delete(context.Background(), "db", metav1.DeleteOptions{})
	claimstest.WaitFor(t, "ordinal 1's claim released with the StatefulSet", func() bool { return api.ClaimsNow(t)[v1alpha1.ClaimName(ip1)] == nil })
}

// A StatefulSet deleted with its pods orphaned and made again under its
// name (to change a field that cannot be changed) adopts the pods: its
// ordinals keep their IPs, also when a pod restarts after.
func TestAStatefulSetMadeAgainUnderItsNameKeepsItsOrdinalsIPs(t *testing.T) {
	old := claimstest.StatefulSet("a", "db", 1)
	first := claimstest.SetPod(old, 0, "n1", "x")
	api := claimstest.New(claimstest.Namespace("a", nil), claimstest.Node("n1", nil), old, first,
		claimstest.Pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: claimstest.Ranges("192.0.2.0/24"), NamespaceSelector: claimstest.EveryNamespace()}))
	n := startNode(t, api, "n1", fast)
	ip := n.claimFor(t, first, "s", "p").Addresses[0]
	ctx := context.Background()
	if err := api.Kube.AppsV1().StatefulSets("a").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := claimstest.StatefulSet("a", "db", 1)
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
	next := claimstest.SetPod(again, 0, "n1", "y")
	if _, err := api.Kube.CoreV1().Pods("a").Create(ctx, next, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimstest.WaitFor(t, "the claim nobody holds kept, naming the StatefulSet made again", func() bool {
		c := api.ClaimsNow(t)[v1alpha1.ClaimName(ip)]
		return c != nil && c.Spec.Owner.StatefulSet.UID == string(again.UID)
	})
	if got := n.claimFor(t, next, "s", "p").Addresses; len(got) != 1 || got[0] != ip {
		t.Fatalf("the ordinal's next pod got %v, want its IP %v", got, ip)
	}
}

func TestTheLeaderWritesEachPoolsCountsAndTheAdmissionPolicysView(t *testing.T) {
	p := claimstest.Pod("a", "web", "n1")
	api := claimstest.New(claimstest.Namespace("a", nil), claimstest.Node("n1", nil), p,
		claimstest.Pool("small", v1alpha1.ExternalIPPoolSpec{Ranges: claimstest.Ranges("192.0.2.0/29"), NamespaceSelector: claimstest.EveryNamespace()}),
		claimstest.Pool("late", v1alpha1.ExternalIPPoolSpec{Ranges: claimstest.Ranges("192.0.2.4-192.0.2.5")}))
	n := startNode(t, api, "n1", fast)
	n.claimFor(t, p, "s", "small")
	status := func(name string) v1alpha1.ExternalIPPoolStatus {
		o, err := api.Tracker.Get(v1alpha1.Pools, "", name)
		if err != nil {
			t.Fatal(err)
		}
		return o.(*v1alpha1.ExternalIPPool).Status
	}
	claimstest.WaitFor(t, "small's status", func() bool { s := status("small"); return s.Size == 6 && s.Used == 1 && s.Free == 5 })
	ready := status("small").Conditions
	if len(ready) != 1 || ready[0].Status != metav1.ConditionTrue {
		t.Errorf("small's conditions %+v", ready)
	}
	// Both pools were made in the same second: "late" sorts after "small"?
	// No: by name, "late" is older. Whichever is refused says why.
	var refused v1alpha1.ExternalIPPoolStatus
	claimstest.WaitFor(t, "a Ready=False on one of the overlapping pools", func() bool {
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
	claimstest.WaitFor(t, "the policy's ConfigMap", func() bool {
		cm, err := api.Kube.CoreV1().ConfigMaps("external-ip").Get(context.Background(), leader.PolicyParams, metav1.GetOptions{})
		return err == nil && cm.Data["small"] == "4192.000.002.000-4192.000.002.007" && cm.Data["late"] != ""
	})
}

// A pool whose ranges are edited to shrink: the leader releases a claim
// left outside them that nobody holds (a StatefulSet's ordinal's too: it
// gets an IP of the ranges next time), keeps a held one until its holders
// go and tells them once with a Warning event, and the pool's status
// counts only the claims inside its ranges.
func TestTheLeaderReleasesAClaimOutsideItsPoolsShrunkRangesOnceNobodyHoldsIt(t *testing.T) {
	set := claimstest.StatefulSet("a", "db", 1)
	web, kept, db0 := claimstest.Pod("a", "web", "n1"), claimstest.Pod("a", "kept", "n1"), claimstest.SetPod(set, 0, "n1", "x")
	api := claimstest.New(claimstest.Namespace("a", nil), claimstest.Node("n1", nil), set, web, kept, db0,
		claimstest.Pool("p", v1alpha1.ExternalIPPoolSpec{Ranges: claimstest.Ranges("192.0.2.0/24"), NamespaceSelector: claimstest.EveryNamespace()}))
	n := startNode(t, api, "n1", fast)
	ipW, ipK, ipS := n.claimFor(t, web, "s", "p").Addresses[0], n.claimFor(t, kept, "s", "p").Addresses[0], n.claimFor(t, db0, "s", "p").Addresses[0]
	n.release(t, db0, "s")
	time.Sleep(200 * time.Millisecond) // a few sweeps: the ordinal's claim is kept
	if api.ClaimsNow(t)[v1alpha1.ClaimName(ipS)] == nil {
		t.Fatal("the ordinal's claim went before the ranges shrank")
	}

	api.SetRanges(t, "p", ipK.String()+"/32", "198.51.100.0/30")
	claimstest.WaitFor(t, "the ordinal's claim outside the ranges released", func() bool { return api.ClaimsNow(t)[v1alpha1.ClaimName(ipS)] == nil })
	claimstest.WaitFor(t, "the pool's status counting only the claim inside", func() bool {
		p, err := api.Pools.Get(context.Background(), "p", metav1.GetOptions{})
		return err == nil && p.Status.Size == 3 && p.Status.Used == 1 && p.Status.Free == 2
	})
	time.Sleep(300 * time.Millisecond) // more sweeps: one event, the held claim kept
	if c := api.ClaimsNow(t)[v1alpha1.ClaimName(ipW)]; c == nil || len(c.Spec.Holders) != 1 {
		t.Errorf("the held claim of %s outside the ranges: %+v; it stays until its holder goes", ipW, c)
	}
	warnings := outsideEvents(t, api, web)
	if len(warnings) != 1 || warnings[0].Count != 1 || !strings.Contains(warnings[0].Message, ipW.String()) || !strings.Contains(warnings[0].Message, "pool p") {
		t.Errorf("events %s on the holder: %+v; want one, once, naming %s and pool p", leader.ReasonOutsidePool, warnings, ipW)
	}
	if got := outsideEvents(t, api, kept); len(got) != 0 {
		t.Errorf("events %s on the holder of a claim inside the ranges: %+v", leader.ReasonOutsidePool, got)
	}
}

// outsideEvents are the ExternalIPOutsidePool events on p.
func outsideEvents(t *testing.T, api *claimstest.API, p *corev1.Pod) []corev1.Event {
	t.Helper()
	l, err := api.Kube.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range l.Items {
		if e.InvolvedObject.UID == p.UID && e.Reason == leader.ReasonOutsidePool && e.Type == corev1.EventTypeWarning {
			out = append(out, e)
		}
	}
	return out
}
