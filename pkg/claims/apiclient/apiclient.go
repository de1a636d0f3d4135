// Package apiclient is how the node process reaches the API server: the
// typed clients of the core kinds and of ours (ExternalIPPool,
// ExternalIPClaim), made from one REST config, and the bound of a request.
// A watch must stay open as long as the API server keeps it, so the
// clients that watch have no client-wide timeout: each request carries a
// context deadline (RequestTimeout, where its caller has none), and what
// client-go calls with contexts that never end (the Lease's acquisition,
// the event sink) gets a client, or a sink, that bounds itself. It only
// makes clients: what they are used for is package claims'.
package apiclient

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

// RequestTimeout bounds one call to the API server (a read, a write, or
// a read-modify-write with its retries on conflict) that no caller's
// deadline bounds already: half of what the plugin waits for a claim.
const RequestTimeout = nodeapi.ClaimTimeout / 2

// PoolClient is what the node process does to pools: read them, and (the
// leader) write their status.
type PoolClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.ExternalIPPoolList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	UpdateStatus(ctx context.Context, p *v1alpha1.ExternalIPPool, opts metav1.UpdateOptions) (*v1alpha1.ExternalIPPool, error)
}

// ClaimClient is what the node process does to claims.
type ClaimClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1alpha1.ExternalIPClaim, error)
	List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.ExternalIPClaimList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, c *v1alpha1.ExternalIPClaim, opts metav1.CreateOptions) (*v1alpha1.ExternalIPClaim, error)
	Update(ctx context.Context, c *v1alpha1.ExternalIPClaim, opts metav1.UpdateOptions) (*v1alpha1.ExternalIPClaim, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Clients are the node process's ways to the API server. Kube, Pools and
// Claims feed the informers too: made by New, they have no Timeout, and
// every request made with them must carry a deadline of its own.
type Clients struct {
	Kube   kubernetes.Interface
	Pools  PoolClient
	Claims ClaimClient
	// Election renews the Lease, with a rate limit of its own: a burst of
	// claims must not starve the renewal and cost the leader its lease.
	// Nil: Kube.
	Election kubernetes.Interface
}

// Scheme knows our types, for the REST client and for fakes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err) // only a programming error: the types register themselves
	}
	return s
}

// New makes the typed clients from a REST config: client-go's own
// generic typed client (gentype) for our kinds, so that no generated
// clientset has to be kept in step with the types.
//
// The clients that watch are made with no Timeout, whatever cfg says:
// client-go gives it to the http.Client, whose Timeout also bounds the
// reading of a watch's body, so every informer would drop its watch and
// reconnect at that period. Each request carries a context deadline
// instead. The Lease's client never watches and keeps RequestTimeout:
// client-go's leader election tries to acquire with a context that has
// no deadline.
func New(cfg *rest.Config) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ec := rest.CopyConfig(cfg)
	ec.Timeout = RequestTimeout
	election, err := kubernetes.NewForConfig(ec)
	if err != nil {
		return nil, err
	}
	scheme := Scheme()
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("a REST client for %s: %w", v1alpha1.SchemeGroupVersion, err)
	}
	pc := runtime.NewParameterCodec(scheme)
	return &Clients{
		Kube: kube, Election: election,
		Pools: gentype.NewClientWithList[*v1alpha1.ExternalIPPool, *v1alpha1.ExternalIPPoolList](
			v1alpha1.PoolResource, rc, pc, "", func() *v1alpha1.ExternalIPPool { return &v1alpha1.ExternalIPPool{} },
			func() *v1alpha1.ExternalIPPoolList { return &v1alpha1.ExternalIPPoolList{} }),
		Claims: gentype.NewClientWithList[*v1alpha1.ExternalIPClaim, *v1alpha1.ExternalIPClaimList](
			v1alpha1.ClaimResource, rc, pc, "", func() *v1alpha1.ExternalIPClaim { return &v1alpha1.ExternalIPClaim{} },
			func() *v1alpha1.ExternalIPClaimList { return &v1alpha1.ExternalIPClaimList{} }),
	}, nil
}

// Bounded calls f with ctx bounded by d: the node process's own loops
// (not a plugin's request, which has its deadline) call the API server
// with contexts that end only with the process.
func Bounded(ctx context.Context, d time.Duration, f func(context.Context)) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	f(ctx)
}

// EventSink writes events with a deadline per request: client-go's own
// sink writes with a context that never ends, and the client has no
// Timeout (it would cut the informers' watches).
func EventSink(events typedcorev1.EventInterface) record.EventSink {
	return boundedSink{events}
}

type boundedSink struct{ events typedcorev1.EventInterface }

func (s boundedSink) Create(e *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	return s.events.CreateWithEventNamespaceWithContext(ctx, e)
}

func (s boundedSink) Update(e *corev1.Event) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	return s.events.UpdateWithEventNamespaceWithContext(ctx, e)
}

func (s boundedSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	return s.events.PatchWithEventNamespaceWithContext(ctx, e, data)
}
