package claims

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/nodeapi"
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
	// A node that does not stop fails its test, rather than hanging the
	// package's run until go test's timeout.
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("node %s did not stop within 30s of its context's end", name)
		}
	}
	t.Cleanup(stop)
	waitFor(t, "the caches synced", func() bool { return n.synced.Load() })
	return &testNode{Node: n, dir: dir, rec: rec, stop: stop}
}

func clientsOf(api *claimstest.API) *apiclient.Clients {
	return &apiclient.Clients{Kube: api.Kube, Pools: api.Pools, Claims: api.Claims}
}

// The objects and waits of claimstest, shared with the leader's tests.
var (
	waitFor        = claimstest.WaitFor
	pool           = claimstest.Pool
	ranges         = claimstest.Ranges
	everyNamespace = claimstest.EveryNamespace
	namespace      = claimstest.Namespace
	node           = claimstest.Node
	pod            = claimstest.Pod
	statefulSet    = claimstest.StatefulSet
	setPod         = claimstest.SetPod
	attachment     = claimstest.Attachment
)

func ptrTo[T any](v T) *T { return &v }

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
	return api.ClaimsNow(t)
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
