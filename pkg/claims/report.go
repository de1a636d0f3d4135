package claims

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// ReasonAssigned is the reason of the Normal event on a pod given IPs.
const ReasonAssigned = "ExternalIPAssigned"

// reasonUnavailable counts the requests that could not be decided.
const reasonUnavailable = "Unavailable"

// startEvents sends the events to the API server until the returned func.
func (n *Node) startEvents() func() {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(apiclient.EventSink(n.cfg.Clients.Kube.CoreV1().Events("")))
	n.events = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "external-ip-node", Host: n.cfg.NodeName})
	return b.Shutdown
}

// report tells the pod, the metrics and the log how a claim went: every
// refusal is a Warning event on the pod, with the refusal's reason.
func (n *Node) report(req nodeapi.Request, resp nodeapi.Response) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: req.Pod.Namespace, Name: req.Pod.Name, UID: types.UID(req.Pod.UID)}
	switch {
	case resp.Unavailable != "":
		n.refused(reasonUnavailable)
		n.log.Warn("claims: cannot decide now", "pod", req.Pod.Namespace+"/"+req.Pod.Name, "why", resp.Unavailable)
	case resp.Reason != "":
		n.refused(resp.Reason)
		n.log.Info("claims: refused", "pod", req.Pod.Namespace+"/"+req.Pod.Name, "reason", resp.Reason, "message", resp.Message)
		if n.events != nil && req.Pod.Name != "" {
			n.events.Event(ref, corev1.EventTypeWarning, resp.Reason, resp.Message)
		}
	case n.events != nil && len(resp.Addresses) > 0:
		n.events.Eventf(ref, corev1.EventTypeNormal, ReasonAssigned, "external IPs %s on node %s", addrList(resp.Addresses), n.cfg.NodeName)
	}
}

func (n *Node) refused(reason string) {
	if n.cfg.Recorder != nil {
		n.cfg.Recorder.Refused(reason)
	}
}

func addrList(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// annotation is a pod to tell which IPs it was given; none takes the
// annotation off.
type annotation struct {
	pod   nodeapi.Pod
	addrs []netip.Addr
}

// annotations tells each pod which IPs it was given: the writes, and the
// repair of those lost.
type annotations struct {
	n     *Node
	queue chan annotation
	// mismatched are the pods whose annotation the last repair pass found
	// naming other IPs than their claims.
	mu         sync.Mutex
	mismatched map[podKey]string
}

// later queues the pod's annotation: the CNI call does not wait for it. A
// full queue drops it (logged), for the repair: the claims are what count.
func (an *annotations) later(p nodeapi.Pod, addrs []netip.Addr) {
	select {
	case an.queue <- annotation{p, addrs}:
	default:
		an.n.log.Warn("claims: annotation queue full; pod not annotated", "pod", p.Namespace+"/"+p.Name)
	}
}

// run writes external-ip/assigned on each pod, and the label by which the
// leader watches the pods that hold claims.
func (an *annotations) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-an.queue:
			an.now(ctx, a)
		}
	}
}

func (an *annotations) now(ctx context.Context, a annotation) {
	n := an.n
	// A pod of several attachments is told every IP it holds here, not
	// the last attachment's alone.
	a.addrs = an.withHeld(a.pod, a.addrs)
	var assigned, holder any = addrList(a.addrs), "true"
	if len(a.addrs) == 0 {
		assigned, holder = nil, nil // holds nothing here: both taken off (null)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		// The UID makes the patch a precondition: never another pod of that name.
		"uid":         a.pod.UID,
		"annotations": map[string]any{v1alpha1.AnnotationAssigned: assigned},
		"labels":      map[string]any{v1alpha1.LabelHolder: holder},
	}})
	// Tries for about half a minute, 1 s apart then doubling: an API
	// server restarting is back within it (the pod's ADD, its claim made
	// when the pod was scheduled, needs none), and what is left the
	// repair writes. An answer no retry changes ends it.
	for try := range 5 {
		err := an.patch(ctx, a.pod, patch)
		if apierrors.IsForbidden(err) {
			// RBAC, or the policy on the node process's pod writes (a
			// token that names no node, a pod of another node): said,
			// for no retry changes it.
			n.log.Warn("claims: annotating pod refused", "pod", a.pod.Namespace+"/"+a.pod.Name, "error", err)
		}
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsForbidden(err) || apierrors.IsInvalid(err) || ctx.Err() != nil {
			return
		}
		n.log.Warn("claims: annotating pod", "pod", a.pod.Namespace+"/"+a.pod.Name, "try", try+1, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second << try):
		}
	}
}

// patch is one try of an annotation's write, bounded as every request.
func (an *annotations) patch(ctx context.Context, p nodeapi.Pod, patch []byte) error {
	ctx, cancel := context.WithTimeout(ctx, apiclient.RequestTimeout)
	defer cancel()
	_, err := an.n.cfg.Clients.Kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
