package claims

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/external-ip/external-ip/pkg/claims/apiclient"
)

// requestTimeout bounds a call of the node process's own loops (package
// apiclient's RequestTimeout).
const requestTimeout = apiclient.RequestTimeout

// bounded calls f with ctx bounded by d: the node process's own loops
// (not a plugin's request, which has its deadline) call the API server
// with contexts that end only with the process.
func bounded(ctx context.Context, d time.Duration, f func(context.Context)) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	f(ctx)
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
