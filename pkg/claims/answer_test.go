package claims

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// On the socket, a granted claim's annotation and event wait for what
// follows the answer (the plugin's close, once its ADD is over): none is
// written before, both are after.
func TestTheSocketsAnswerComesBeforeThePodIsTold(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("v4", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1")
	// The node's first pass repairs annotations, and would annotate the
	// pod had it run after the claim; the next is an hour away.
	waitFor(t, "the node's first pass", func() bool {
		n.notes.mu.Lock()
		defer n.notes.mu.Unlock()
		return n.notes.mismatched != nil
	})
	req := nodeapi.Request{Op: nodeapi.OpClaim, Attachment: attachment(p, "s1"), Pool: "v4",
		Pod: nodeapi.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}}
	if err := nodeapi.MarkIntent(n.dir, nodeapi.Marker{Attachment: req.Attachment, Pod: req.Pod}); err != nil {
		t.Fatal(err)
	}
	resp, after := Answering(n.Node)(context.Background(), req)
	if resp.Reason != "" || resp.Unavailable != "" || len(resp.Addresses) != 1 || after == nil {
		t.Fatalf("claim: %+v (after %v)", resp, after != nil)
	}
	told := func() (annotated, event bool) {
		got, _ := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
		annotated = got.Annotations[v1alpha1.AnnotationAssigned] != ""
		event = slices.ContainsFunc(eventsOn(t, api, p), func(e string) bool { return strings.Contains(e, ReasonAssigned) })
		return annotated, event
	}
	time.Sleep(300 * time.Millisecond)
	if a, e := told(); a || e {
		t.Fatalf("before after: annotated %v, event %v; want neither", a, e)
	}
	after()
	waitFor(t, "the pod annotated and its event", func() bool { a, e := told(); return a && e })
}
