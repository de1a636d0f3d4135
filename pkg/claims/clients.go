package claims

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/nodeapi"
)

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
// Claims feed the informers too: made by NewClients, they have no
// Timeout, and every request of this package bounds itself.
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

// requestTimeout bounds one call to the API server (a read, a write, or
// a read-modify-write with its retries on conflict) that no caller's
// deadline bounds already: half of what the plugin waits for a claim.
const requestTimeout = nodeapi.ClaimTimeout / 2

// bounded calls f with ctx bounded by d: the node process's own loops
// (not a plugin's request, which has its deadline) call the API server
// with contexts that end only with the process.
func bounded(ctx context.Context, d time.Duration, f func(context.Context)) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	f(ctx)
}

// NewClients makes the typed clients from a REST config: client-go's own
// generic typed client (gentype) for our kinds, so that no generated
// clientset has to be kept in step with the types.
//
// The clients that watch are made with no Timeout, whatever cfg says:
// client-go gives it to the http.Client, whose Timeout also bounds the
// reading of a watch's body, so every informer would drop its watch and
// reconnect at that period. Each request carries a context deadline
// instead. The Lease's client never watches and keeps requestTimeout:
// client-go's leader election tries to acquire with a context that has
// no deadline.
func NewClients(cfg *rest.Config) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ec := rest.CopyConfig(cfg)
	ec.Timeout = requestTimeout
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

// lister is a typed client's List and Watch.
type lister[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// listWatch feeds an informer from a typed client; tweak, when set,
// narrows what it lists and watches. client is what says whether the
// server streams lists through watches (client-go's fakes say they do
// not): the typed client, or the clientset it came from.
func listWatch[L runtime.Object](c lister[L], tweak func(*metav1.ListOptions), client any) cache.ListerWatcher {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return c.Watch(ctx, o)
		},
	}, client)
}
