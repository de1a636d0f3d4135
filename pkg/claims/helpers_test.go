package claims

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

func quiet() *slog.Logger {
	if os.Getenv("CLAIMS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// counter is a Recorder that counts refusals by reason.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) Refused(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[reason]++
}

func (c *counter) get(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[reason]
}

// testNode is a node process's claim service on a fake API server.
type testNode struct {
	*Node
	dir  string
	rec  *counter
	stop func() // the process ends (its node goes down)
	// drains counts drainNotes's marks, each one an IP of its own.
	drains int
}

// startNode runs a node named name until the test ends, once its caches
// are synced.
func startNode(t *testing.T, api *claimstest.API, name string, tweak ...func(*Config)) *testNode {
	t.Helper()
	dir := t.TempDir()
	rec := &counter{}
	cfg := Config{Clients: clientsOf(api), NodeName: name, DataDir: dir, Namespace: "external-ip", Log: quiet().With("node", name),
		Recorder: rec, LocalEvery: time.Hour, SweepEvery: time.Hour}
	for _, f := range tweak {
		f(&cfg)
	}
	n := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	waitFor(t, "the caches synced", func() bool { return n.synced.Load() })
	return &testNode{Node: n, dir: dir, rec: rec, stop: stop}
}

func clientsOf(api *claimstest.API) *apiclient.Clients {
	return &apiclient.Clients{Kube: api.Kube, Pools: api.Pools, Claims: api.Claims}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pool(name string, spec v1alpha1.ExternalIPPoolSpec) *v1alpha1.ExternalIPPool {
	return &v1alpha1.ExternalIPPool{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Now()}, Spec: spec}
}

func ranges(r ...string) []v1alpha1.Range {
	out := make([]v1alpha1.Range, len(r))
	for i, s := range r {
		out[i] = v1alpha1.Range(s)
	}
	return out
}

func everyNamespace() *metav1.LabelSelector { return &metav1.LabelSelector{} }

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func pod(ns, name, nodeName string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: corev1.PodSpec{NodeName: nodeName}}
}

func statefulSet(ns, name string, replicas int32) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-sts-" + name)},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas}}
}

// setPod is pod ordinal of set, with a UID of its own (each incarnation).
func setPod(set *appsv1.StatefulSet, ordinal int, nodeName, incarnation string) *corev1.Pod {
	p := pod(set.Namespace, fmt.Sprintf("%s-%d", set.Name, ordinal), nodeName)
	p.UID = types.UID(string(p.UID) + "-" + incarnation)
	p.Labels = map[string]string{appsv1.PodIndexLabel: fmt.Sprint(ordinal)}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: set.Name, UID: set.UID, Controller: ptrTo(true)}}
	return p
}

func ptrTo[T any](v T) *T { return &v }

// attachment is the attachment of p's sandbox (one per container ID).
func attachment(p *corev1.Pod, sandbox string) store.Attachment {
	return store.Attachment{Network: "pods", ContainerID: string(p.UID) + "-" + sandbox, IfName: "eth0"}
}

// claimFor asks as the plugin does: the intent first, then the request.
func (n *testNode) claimFor(t *testing.T, p *corev1.Pod, sandbox, pool string, addrs ...string) nodeapi.Response {
	t.Helper()
	req := nodeapi.Request{Op: nodeapi.OpClaim, Attachment: attachment(p, sandbox), Pool: pool,
		Pod: nodeapi.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}}
	for _, a := range addrs {
		req.Addresses = append(req.Addresses, netip.MustParseAddr(a))
	}
	if err := nodeapi.MarkIntent(n.dir, nodeapi.Marker{Attachment: req.Attachment, Pod: req.Pod}); err != nil {
		t.Fatal(err)
	}
	return n.Handle(socketContext(t), req)
}

// socketContext is a request's context as the socket gives it: it ends
// at nodeapi.ClaimTimeout.
func socketContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), nodeapi.ClaimTimeout)
	t.Cleanup(cancel)
	return ctx
}

// release releases as the plugin's DEL does, then forgets the intent.
func (n *testNode) release(t *testing.T, p *corev1.Pod, sandbox string) {
	t.Helper()
	a := attachment(p, sandbox)
	if resp := n.Handle(socketContext(t), nodeapi.Request{Op: nodeapi.OpRelease, Attachment: a}); resp.Unavailable != "" || resp.Reason != "" {
		t.Fatalf("release of %s: %+v", a, resp)
	}
	if err := nodeapi.Forget(n.dir, a); err != nil {
		t.Fatal(err)
	}
}

// claimsNow are the claims on the server, name -> claim.
func claimsNow(t *testing.T, api *claimstest.API) map[string]*v1alpha1.ExternalIPClaim {
	t.Helper()
	l, err := api.Claims.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*v1alpha1.ExternalIPClaim{}
	for i := range l.Items {
		out[l.Items[i].Name] = &l.Items[i]
	}
	return out
}

func addrsOf(r nodeapi.Response) string {
	s := make([]string, len(r.Addresses))
	for i, a := range r.Addresses {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// eventsOn are the events on a pod, "Type Reason: message".
func eventsOn(t *testing.T, api *claimstest.API, p *corev1.Pod) []string {
	t.Helper()
	l, err := api.Kube.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range l.Items {
		if e.InvolvedObject.Name == p.Name && e.InvolvedObject.UID == p.UID {
			out = append(out, e.Type+" "+e.Reason+": "+e.Message)
		}
	}
	slices.Sort(out)
	return out
}

func objects(o ...runtime.Object) []runtime.Object { return o }
