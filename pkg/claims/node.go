package claims

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/keylock"
	"github.com/external-ip/external-ip/pkg/pools"
)

// Config is what a node process needs to serve claims.
type Config struct {
	Clients *apiclient.Clients
	// NodeName is this node's name (the DaemonSet passes spec.nodeName).
	NodeName string
	// DataDir is the plugin's dataDir: the intents and deferred releases.
	DataDir string
	// Namespace is the node process's own: its Lease and the ConfigMap
	// that the admission policy reads.
	Namespace string
	Log       *slog.Logger
	// Recorder counts refusals and serves the pools' counts (nil: none).
	Recorder Recorder
	// LocalEvery is how often the node's own holders are reconciled with
	// its intents and its deferred releases carried out; SweepEvery how
	// often the leader sweeps every claim. Zero: the defaults.
	LocalEvery, SweepEvery time.Duration
	// Seed, when set, makes the choice of free IPs repeatable (tests).
	Seed uint64
}

// Recorder is told of every refusal; package metrics counts them.
type Recorder interface {
	Refused(reason string)
}

// Defaults; SweepEvery is what bounds the release of a claim whose pod
// was deleted while its node was down: within SweepEvery plus one pass.
const (
	defaultLocalEvery = 10 * time.Second
	defaultSweepEvery = 20 * time.Second
)

// Node serves the plugin's claims on one node, and leads the cluster's
// reconciliation when its Lease says so.
type Node struct {
	cfg    Config
	log    *slog.Logger
	claims cache.SharedIndexInformer
	pools  cache.SharedIndexInformer
	kube   informers.SharedInformerFactory // namespaces
	local  informers.SharedInformerFactory // this node's pods and Node
	set    atomic.Pointer[pools.Set]
	// poolsMu serialises poolsChanged.
	poolsMu sync.Mutex
	synced  atomic.Bool
	// locks serialise the calls of one attachment: a release waits for a
	// claim still under way.
	locks  keyedMutex
	recent recent
	events record.EventRecorder
	// notes tells the pods what they got, off the CNI call's path.
	notes annotations
	// early claims for the pods scheduled here.
	early earlyClaims
	rndMu sync.Mutex
	rnd   *rand.Rand
}

// New makes a node's claim service; Run starts it.
func New(cfg Config) *Node {
	if cfg.LocalEvery == 0 {
		cfg.LocalEvery = defaultLocalEvery
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = defaultSweepEvery
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	n := &Node{cfg: cfg, log: cfg.Log, rnd: rand.New(rand.NewPCG(seed, seed))}
	n.claims = cache.NewSharedIndexInformer(listWatch(cfg.Clients.Claims, nil, cfg.Clients.Claims), &v1alpha1.ExternalIPClaim{}, 0, claimIndexers)
	n.pools = cache.NewSharedIndexInformer(listWatch(cfg.Clients.Pools, nil, cfg.Clients.Pools), &v1alpha1.ExternalIPPool{}, 0, cache.Indexers{})
	n.kube = informers.NewSharedInformerFactory(cfg.Clients.Kube, 0)
	n.kube.Core().V1().Namespaces().Informer()
	n.local = informers.NewSharedInformerFactoryWithOptions(cfg.Clients.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			// Pods of this node, and this node: what a node agent watches.
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	n.local.Core().V1().Pods().Informer()
	n.nodeInformer()
	n.notes = annotations{n: n, queue: make(chan annotation, 256)}
	n.early = earlyClaims{n: n}
	n.early.watch()
	n.claims.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: n.early.cached})
	n.pools.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { n.poolsChanged() },
		UpdateFunc: func(any, any) { n.poolsChanged() },
		DeleteFunc: func(any) { n.poolsChanged() },
	})
	n.set.Store(pools.Resolve(nil))
	return n
}

// nodeInformer watches this node's Node object alone, for nodeSelector.
func (n *Node) nodeInformer() {
	lw := listWatch(n.cfg.Clients.Kube.CoreV1().Nodes(), func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", n.cfg.NodeName).String()
	}, n.cfg.Clients.Kube)
	inf := n.local.InformerFor(&corev1.Node{}, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	})
	// The pools published to the plugin follow the node's labels.
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { n.poolsChanged() },
		UpdateFunc: func(old, cur any) {
			if !maps.Equal(old.(*corev1.Node).Labels, cur.(*corev1.Node).Labels) {
				n.poolsChanged()
			}
		},
	})
}

// Run serves until ctx ends: the informers, the node's own reconciliation,
// the pod annotations and, while this node leads, the cluster's.
func (n *Node) Run(ctx context.Context) error {
	// The queue's goroutines run from New: shut down on every return,
	// before the caches synced too.
	defer n.early.queue.ShutDown()
	// Their handlers write this node's files (the pools the plugin reads):
	// none may still be running when Run returns.
	var informers sync.WaitGroup
	defer informers.Wait()
	informers.Go(func() { n.claims.RunWithContext(ctx) })
	informers.Go(func() { n.pools.RunWithContext(ctx) })
	n.kube.Start(ctx.Done())
	n.local.Start(ctx.Done())
	defer n.kube.Shutdown()
	defer n.local.Shutdown()
	stopEvents := n.startEvents()
	defer stopEvents()
	if !cache.WaitForCacheSync(ctx.Done(), n.claims.HasSynced, n.pools.HasSynced) {
		return ctx.Err()
	}
	n.kube.WaitForCacheSync(ctx.Done())
	n.local.WaitForCacheSync(ctx.Done())
	n.poolsChanged()
	n.synced.Store(true)
	n.log.Info("claims: caches synced", "node", n.cfg.NodeName, "claims", len(n.claims.GetStore().ListKeys()), "pools", n.set.Load().Len())
	var wg sync.WaitGroup
	wg.Go(func() { n.notes.run(ctx) })
	wg.Go(func() { n.localLoop(ctx) })
	wg.Go(func() { n.lead(ctx) })
	wg.Go(func() { n.early.run(ctx) })
	<-ctx.Done()
	n.early.queue.ShutDown()
	wg.Wait()
	return nil
}

// poolsChanged reads the pools again and publishes them to the plugin. The
// pools' and the Node's handlers both call it: one at a time, so that an
// older read never overwrites a newer.
func (n *Node) poolsChanged() {
	n.poolsMu.Lock()
	defer n.poolsMu.Unlock()
	var objs []*v1alpha1.ExternalIPPool
	for _, o := range n.pools.GetStore().List() {
		objs = append(objs, o.(*v1alpha1.ExternalIPPool))
	}
	set := pools.Resolve(objs)
	n.set.Store(set)
	if n.synced.Load() || n.pools.HasSynced() {
		n.publish(set)
	}
}

// ready says why the node cannot decide yet, "" once it can.
func (n *Node) ready() string {
	if !n.synced.Load() {
		return "its caches of pools and claims are not synced with the API server yet"
	}
	return ""
}

func (n *Node) String() string { return fmt.Sprintf("claims on node %s", n.cfg.NodeName) }

// keyedMutex is the node's lock per key (an owner's, an attachment's).
type keyedMutex struct{ keylock.Keyed }

func (k *keyedMutex) lock(key string) func() { return k.Lock(key) }
