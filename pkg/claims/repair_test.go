package claims

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/claims/leader"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/test/logbuf"
)

// A node process that stops between its answer and the pod's annotation
// (a rollout) loses the write; the next one writes it from the claims.
func TestAPodWhoseAnnotationWasLostIsAnnotatedAgainByTheNextNodeProcess(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("dual", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29", "2001:db8::/125"), NamespaceSelector: everyNamespace()}))
	first := startNode(t, api, "n1")
	resp := first.claimFor(t, p, "s1", "dual")
	if len(resp.Addresses) != 2 {
		t.Fatalf("claim: %+v", resp)
	}
	annotated := func(want string) func() bool {
		return func() bool {
			got, _ := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
			return got.Annotations[v1alpha1.AnnotationAssigned] == want && got.Labels[v1alpha1.LabelHolder] == "true"
		}
	}
	waitFor(t, "the pod annotated", annotated(addrsOf(resp)))
	first.stop()
	// The write lost: the pod as the API server has it without it.
	setAnnotation(t, api, "")
	startNode(t, api, "n1", fast, func(c *Config) { c.DataDir = first.dir })
	waitFor(t, "the pod annotated again", annotated(addrsOf(resp)))
}

// An annotation that names other IPs than the pod's claims (the last of
// two attachments' answers, or a hand edit) is written again, once two
// passes agree.
func TestAnAnnotationNamingOtherIPsIsWrittenAgainAndAnotherPodOfTheNameIsLeftAlone(t *testing.T) {
	p, marker := pod("a", "web", "n1"), pod("a", "marker", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p, marker, leaseHeldElsewhere(),
		pool("a", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}),
		pool("b", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("198.51.100.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	n.waitForFirstPass(t)
	resp := n.claimFor(t, p, "s1", "a")
	other := n.claimFor(t, p, "s2", "b")         // a second attachment of the pod, of another pool
	want := addrsOf(resp) + "," + addrsOf(other) // 192.0.2.x before 198.51.100.x
	waitFor(t, "the pod annotated with both attachments' IPs", func() bool { return annotationOf(t, api) == want })
	n.drainNotes(t, api, marker) // the second answer's write, which would undo the edit below
	setAnnotation(t, api, "192.0.2.200")
	n.waitForCachedPod(t, func(q *corev1.Pod) bool { return q.Annotations[v1alpha1.AnnotationAssigned] == "192.0.2.200" })
	n.notes.repair()
	n.drainNotes(t, api, marker)
	if a := annotationOf(t, api); a != "192.0.2.200" {
		t.Fatalf("one pass wrote the annotation (%q): a cache behind a release would write wrong IPs", a)
	}
	n.notes.repair()
	waitFor(t, "the wrong annotation written again", func() bool { return annotationOf(t, api) == want })

	// Another pod of the same name (a new UID) holds none of them. No
	// node process leads (the Lease is another's), so the old pod's
	// holders stay, and the repair must tell the pods apart by UID.
	got, _ := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
	got.UID, got.Annotations = "uid-new", nil
	if _, err := api.Kube.CoreV1().Pods("a").Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitForCachedPod(t, func(q *corev1.Pod) bool { return q.UID == "uid-new" })
	if held := n.notes.heldByPod()[podKey{"a", "web", string(p.UID)}]; len(held) != 2 {
		t.Fatalf("the old pod of the name holds %v here; the test needs its two IPs still claimed", held)
	}
	n.notes.repair()
	n.notes.repair()
	n.drainNotes(t, api, marker)
	if a := annotationOf(t, api); a != "" {
		t.Errorf("the new pod of the name was annotated %q with the old one's IPs", a)
	}
}

// A pod whose sandbox was deleted, and whose next ADD was refused (the
// pool's one IP went to another pod meanwhile), holds nothing: its
// annotation goes, once two passes agree, and the other pod's stays.
func TestTheAnnotationOfAPodThatHoldsNothingHereIsTakenOff(t *testing.T) {
	p, taker, marker := pod("a", "web", "n1"), pod("a", "taker", "n1"), pod("a", "marker", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p, taker, marker,
		pool("one", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.1-192.0.2.1"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	n.waitForFirstPass(t)
	ip := addrsOf(n.claimFor(t, p, "s1", "one"))
	waitFor(t, "the pod annotated", func() bool { return annotationOf(t, api) == ip })
	n.release(t, p, "s1")
	waitFor(t, "the cache sees the release", func() bool { return n.cached(netip.MustParseAddr(ip)) == nil })
	if got := addrsOf(n.claimFor(t, taker, "s1", "one")); got != ip {
		t.Fatalf("the other pod got %q, want the pool's one IP %s", got, ip)
	}
	if r := n.claimFor(t, p, "s2", "one"); r.Reason != nodeapi.ReasonPoolExhausted {
		t.Fatalf("the pod's next ADD: %+v, want %s", r, nodeapi.ReasonPoolExhausted)
	}
	waitFor(t, "the cache sees the IP held by the other pod alone", func() bool {
		held := n.notes.heldByPod()
		return len(held) == 1 && len(held[podKey{"a", "taker", string(taker.UID)}]) == 1
	})
	n.notes.repair()
	n.drainNotes(t, api, marker)
	if a := annotationOf(t, api); a != ip {
		t.Fatalf("one pass changed the annotation to %q: a cache behind a claim would take it off", a)
	}
	n.notes.repair()
	waitFor(t, "the annotation and the holder label taken off", func() bool {
		got, _ := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
		_, annotated := got.Annotations[v1alpha1.AnnotationAssigned]
		_, labelled := got.Labels[v1alpha1.LabelHolder]
		return !annotated && !labelled
	})
	if got, _ := api.Kube.CoreV1().Pods("a").Get(context.Background(), "taker", metav1.GetOptions{}); got.Annotations[v1alpha1.AnnotationAssigned] != ip {
		t.Errorf("the pod that holds the IP is annotated %q, want %s", got.Annotations[v1alpha1.AnnotationAssigned], ip)
	}
}

// waitForCachedPod waits until this node's cache has pod a/web as ok says.
func (n *testNode) waitForCachedPod(t *testing.T, ok func(*corev1.Pod) bool) {
	t.Helper()
	waitFor(t, "the cache sees pod a/web changed", func() bool {
		q, err := n.local.Core().V1().Pods().Lister().Pods("a").Get("web")
		return err == nil && ok(q)
	})
}

// waitForFirstPass waits for the node's pass at its start, whose repair
// would otherwise count as one of the two a test calls.
func (n *testNode) waitForFirstPass(t *testing.T) {
	t.Helper()
	waitFor(t, "the node's first pass", func() bool {
		n.notes.mu.Lock()
		defer n.notes.mu.Unlock()
		return n.notes.mismatched != nil
	})
}

// drainNotes waits until every annotation queued so far is written: the
// queue has one writer, in order, so a write queued now for marker, once
// the server has it, comes after them all.
func (n *testNode) drainNotes(t *testing.T, api *claimstest.API, marker *corev1.Pod) {
	t.Helper()
	n.drains++
	ip := netip.AddrFrom4([4]byte{203, 0, 113, byte(n.drains)})
	n.notes.later(nodeapi.Pod{Namespace: marker.Namespace, Name: marker.Name, UID: string(marker.UID)}, []netip.Addr{ip})
	waitFor(t, "the annotation queue drained", func() bool {
		got, err := api.Kube.CoreV1().Pods(marker.Namespace).Get(context.Background(), marker.Name, metav1.GetOptions{})
		return err == nil && got.Annotations[v1alpha1.AnnotationAssigned] == ip.String()
	})
}

// leaseHeldElsewhere is the claims Lease held by another node process for
// an hour: the node under test never leads, and no sweep releases what
// the test needs held.
func leaseHeldElsewhere() *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leader.LeaseName, Namespace: "external-ip"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo("elsewhere"), LeaseDurationSeconds: ptrTo(int32(3600)), AcquireTime: &now, RenewTime: &now}}
}

func annotationOf(t *testing.T, api *claimstest.API) string {
	t.Helper()
	got, err := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Annotations[v1alpha1.AnnotationAssigned]
}

// setAnnotation sets pod a/web's annotation, "" to remove it.
func setAnnotation(t *testing.T, api *claimstest.API, v string) {
	t.Helper()
	got, err := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(got.Annotations, v1alpha1.AnnotationAssigned)
	if v != "" {
		got.Annotations[v1alpha1.AnnotationAssigned] = v
	}
	if _, err := api.Kube.CoreV1().Pods("a").Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A write the API server forbids (the policy on the node process's pod
// writes, say, when its token names no node) is not retried, and is said:
// silent, every pod would go unannotated with no trace of why.
func TestAnAnnotationTheAPIServerForbidsIsLogged(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("a", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	patches := atomic.Int32{}
	api.Kube.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), "web", errors.New("external-ip-node may change only the pods of its node"))
	})
	var log logbuf.Buffer
	n := startNode(t, api, "n1", func(c *Config) { c.Log = log.Logger() })
	n.claimFor(t, p, "s1", "a")
	waitFor(t, "the refusal logged", func() bool {
		return strings.Contains(log.String(), `"msg":"claims: annotating pod refused","pod":"a/web"`) && strings.Contains(log.String(), "may change only the pods of its node")
	})
	time.Sleep(1500 * time.Millisecond) // a retry would come 1 s after
	if got := patches.Load(); got != 1 {
		t.Errorf("%d patches, want 1: a forbidden write is not retried", got)
	}
}
