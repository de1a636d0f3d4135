package leader

import (
	"context"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/claims/trimmed"
	"github.com/external-ip/external-ip/pkg/pools"
)

// LeaseName is the Lease, in the node process's namespace, that elects the
// one node process that reconciles the cluster's claims.
const LeaseName = "external-ip-claims"

// ReasonOutsidePool is the reason of the Warning event on a pod that holds
// a claim its pool's ranges, edited, no longer hold.
const ReasonOutsidePool = "ExternalIPOutsidePool"

// Config is what a term needs of the node process's configuration.
type Config struct {
	Clients *apiclient.Clients
	// NodeName is the node process's identity in the election.
	NodeName string
	// Namespace is the node process's own: the Lease's and PolicyParams'.
	Namespace string
	// SweepEvery is how often a term sweeps every claim.
	SweepEvery time.Duration
	Log        *slog.Logger
}

// Node is what the leader needs of the node process (package claims's
// Node): its caches, synced before Run, and its writes of claims.
type Node interface {
	// Claims and Pools are the node's informers of every claim and pool.
	Claims() cache.SharedIndexInformer
	Pools() cache.SharedIndexInformer
	// Set is the pools as the node last read them.
	Set() *pools.Set
	// Counts are every pool's numbers, those the metrics serve.
	Counts() []pools.Count
	// Update changes a claim by change (which says whether it changed
	// it), trying again on a conflict.
	Update(ctx context.Context, name string, change func(*v1alpha1.ExternalIPClaim) bool) error
	// RemoveHolder takes the holder's attachment off the claim, deleting
	// the claim once nobody holds it (but a StatefulSet's).
	RemoveHolder(ctx context.Context, name string, h v1alpha1.ClaimHolder) error
	// DeleteClaim deletes c as it was read: not if it changed since.
	DeleteClaim(ctx context.Context, c *v1alpha1.ExternalIPClaim) error
	// Events records the events on pods, as the node's own are.
	Events() record.EventRecorder
}

// Run takes part in the election until ctx ends, reconciling the
// cluster's claims while it leads.
func Run(ctx context.Context, cfg Config, n Node) {
	client := cfg.Clients.Election
	if client == nil {
		client = cfg.Clients.Kube
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: LeaseName, Namespace: cfg.Namespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.NodeName},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			ReleaseOnCancel: true, Name: LeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					cfg.Log.Info("claims: leading the cluster's reconciliation", "node", cfg.NodeName)
					reconcile(ctx, cfg, n)
				},
				OnStoppedLeading: func() { cfg.Log.Info("claims: no longer leading", "node", cfg.NodeName) },
			},
		})
	}
}

// leader is the state of one term of leadership.
type leader struct {
	Node
	cfg        Config
	log        *slog.Logger
	pods, sets cache.SharedIndexInformer
	kick       chan struct{}
	// warned are the holders told this term that their claim lies
	// outside its pool: claim UID/pod UID.
	warned map[string]bool
}

// reconcile sweeps every claim now, on every change that may free one, and
// every SweepEvery, until the term ends.
func reconcile(ctx context.Context, cfg Config, n Node) {
	f, holders := trimmed.Holders(cfg.Clients.Kube)
	sets, setsInformer := trimmed.StatefulSets(cfg.Clients.Kube)
	l := &leader{Node: n, cfg: cfg, log: cfg.Log, pods: holders, sets: setsInformer, kick: make(chan struct{}, 1), warned: map[string]bool{}}
	kick := cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) { l.kickNow() }, UpdateFunc: func(any, any) { l.kickNow() }}
	l.pods.AddEventHandler(kick)
	l.sets.AddEventHandler(kick)
	// A holder gone, a pool to count: until the term ends.
	if reg, err := n.Claims().AddEventHandler(kick); err == nil {
		defer n.Claims().RemoveEventHandler(reg)
	}
	if reg, err := n.Pools().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { l.kickNow() }, UpdateFunc: func(any, any) { l.kickNow() }}); err == nil {
		defer n.Pools().RemoveEventHandler(reg)
	}
	f.Start(ctx.Done())
	sets.Start(ctx.Done())
	defer f.Shutdown()
	defer sets.Shutdown()
	f.WaitForCacheSync(ctx.Done())
	sets.WaitForCacheSync(ctx.Done())
	t := time.NewTicker(cfg.SweepEvery)
	defer t.Stop()
	for {
		l.sweep(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.kick:
		}
	}
}

func (l *leader) kickNow() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}
