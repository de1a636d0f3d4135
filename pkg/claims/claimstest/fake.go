// Package claimstest is a fake API server for package claims' tests and
// those of its users: client-go's fake clientset for the core kinds, and
// client-go's object tracker behind the generic fake typed client for
// ours, with what the real server does and the tracker alone does not:
// resourceVersions, a conflict for an update or a delete made from a stale
// copy, and a delete's preconditions. It records every request, so that a
// test can compare them with the RBAC rules. A test can make it misbehave
// as a real server and its network may: a create that commits but whose
// answer is lost and whose watch event comes late (LoseNextCreate), a
// create or deletes whose watch events come late (HideNextCreate,
// HideDeletes), and another client's delete and create of a claim between
// a read and a write (RemakeBefore).
package claimstest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
)

// API is the fake server. Its clients are those of package claims'
// Clients: apiclient.Clients{Kube: api.Kube, Pools: api.Pools, Claims: api.Claims}.
type API struct {
	Kube    *fake.Clientset
	Pools   FakePools
	Claims  FakeClaims
	Ours    *k8stesting.Fake
	Tracker k8stesting.ObjectTracker

	mu sync.Mutex
	rv int64
	// loseCreates is how many of the next creates lose their answer,
	// hideCreates how many answer but are held from the watches, and
	// hideDeletes holds every delete from them; held are the names whose
	// watch events wait for echo's close.
	loseCreates, hideCreates int
	hideDeletes              bool
	held                     map[string]bool
	echo                     chan struct{}
	// remakes are the claims to make anew before the next request of a
	// verb on their name.
	remakes map[[2]string]*v1alpha1.ExternalIPClaim
}

// New is a fake server holding objs (core kinds and ours alike).
func New(objs ...runtime.Object) *API {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	tracker := k8stesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())
	a := &API{Ours: &k8stesting.Fake{}, Tracker: tracker, held: map[string]bool{}, echo: make(chan struct{}),
		remakes: map[[2]string]*v1alpha1.ExternalIPClaim{}}
	var core []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *v1alpha1.ExternalIPPool, *v1alpha1.ExternalIPClaim:
			a.stamp(o)
			if err := tracker.Add(o); err != nil {
				panic(err)
			}
		default:
			core = append(core, o)
		}
	}
	a.Kube = fake.NewClientset(core...)
	a.Kube.PrependReactor("patch", "pods", a.patchPrecondition)
	a.Ours.AddReactor("create", "*", a.create)
	a.Ours.AddReactor("update", "*", a.update)
	a.Ours.AddReactor("delete", "*", a.delete)
	a.Ours.AddReactor("*", "*", k8stesting.ObjectReaction(tracker))
	a.Ours.AddWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := tracker.Watch(action.GetResource(), action.GetNamespace(), action.(k8stesting.WatchActionImpl).ListOptions)
		if err != nil {
			return true, nil, err
		}
		return true, a.holding(w), nil
	})
	a.Pools.FakeClientWithList = gentype.NewFakeClientWithList(a.Ours, "", v1alpha1.Pools, v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.PoolKind),
		func() *v1alpha1.ExternalIPPool { return &v1alpha1.ExternalIPPool{} },
		func() *v1alpha1.ExternalIPPoolList { return &v1alpha1.ExternalIPPoolList{} },
		func(dst, src *v1alpha1.ExternalIPPoolList) { dst.ListMeta = src.ListMeta },
		func(l *v1alpha1.ExternalIPPoolList) []*v1alpha1.ExternalIPPool {
			return gentype.ToPointerSlice(l.Items)
		},
		func(l *v1alpha1.ExternalIPPoolList, items []*v1alpha1.ExternalIPPool) {
			l.Items = gentype.FromPointerSlice(items)
		})
	a.Claims.FakeClientWithList = gentype.NewFakeClientWithList(a.Ours, "", v1alpha1.Claims, v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.ClaimKind),
		func() *v1alpha1.ExternalIPClaim { return &v1alpha1.ExternalIPClaim{} },
		func() *v1alpha1.ExternalIPClaimList { return &v1alpha1.ExternalIPClaimList{} },
		func(dst, src *v1alpha1.ExternalIPClaimList) { dst.ListMeta = src.ListMeta },
		func(l *v1alpha1.ExternalIPClaimList) []*v1alpha1.ExternalIPClaim {
			return gentype.ToPointerSlice(l.Items)
		},
		func(l *v1alpha1.ExternalIPClaimList, items []*v1alpha1.ExternalIPClaim) {
			l.Items = gentype.FromPointerSlice(items)
		})
	return a
}

// FakePools and FakeClaims are the fake typed clients of our kinds.
type (
	FakePools struct {
		*gentype.FakeClientWithList[*v1alpha1.ExternalIPPool, *v1alpha1.ExternalIPPoolList]
	}
	FakeClaims struct {
		*gentype.FakeClientWithList[*v1alpha1.ExternalIPClaim, *v1alpha1.ExternalIPClaimList]
	}
)

// IsWatchListSemanticsUnSupported tells client-go's informers that the
// tracker does not stream lists through watches, as its fake clientset says.
func (FakePools) IsWatchListSemanticsUnSupported() bool  { return true }
func (FakeClaims) IsWatchListSemanticsUnSupported() bool { return true }

// stamp gives o the next resourceVersion, and a UID when it has none.
func (a *API) stamp(o runtime.Object) {
	m, _ := meta.Accessor(o)
	a.rv++
	m.SetResourceVersion(strconv.FormatInt(a.rv, 10))
	if m.GetUID() == "" {
		m.SetUID(types.UID(fmt.Sprintf("uid-%s-%d", m.GetName(), a.rv)))
	}
}

func (a *API) create(action k8stesting.Action) (bool, runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o := action.(k8stesting.CreateAction).GetObject().DeepCopyObject()
	m, _ := meta.Accessor(o)
	a.remakeFor(action, m.GetName())
	a.stamp(o)
	lose, hide := a.loseCreates > 0, a.hideCreates > 0
	if lose || hide {
		a.held[m.GetName()] = true // before the tracker tells its watchers
	}
	if err := a.Tracker.Create(action.GetResource(), o, action.GetNamespace()); err != nil {
		delete(a.held, m.GetName())
		return true, nil, err
	}
	switch {
	case lose:
		a.loseCreates--
		return true, nil, apierrors.NewTimeoutError("request did not complete within the allowed duration", 1)
	case hide:
		a.hideCreates--
	}
	return true, o, nil
}

// update refuses a copy whose resourceVersion is not the stored one, as
// the server's optimistic concurrency does.
func (a *API) update(action k8stesting.Action) (bool, runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o := action.(k8stesting.UpdateAction).GetObject().DeepCopyObject()
	m, _ := meta.Accessor(o)
	a.remakeFor(action, m.GetName())
	cur, err := a.Tracker.Get(action.GetResource(), action.GetNamespace(), m.GetName())
	if err != nil {
		return true, nil, err
	}
	cm, _ := meta.Accessor(cur)
	if m.GetResourceVersion() != cm.GetResourceVersion() {
		return true, nil, apierrors.NewConflict(action.GetResource().GroupResource(), m.GetName(),
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	m.SetUID(cm.GetUID())
	a.stamp(o)
	if err := a.Tracker.Update(action.GetResource(), o, action.GetNamespace()); err != nil {
		return true, nil, err
	}
	return true, o, nil
}

// delete honours the preconditions (UID, resourceVersion).
func (a *API) delete(action k8stesting.Action) (bool, runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := action.(k8stesting.DeleteActionImpl)
	a.remakeFor(action, d.Name)
	cur, err := a.Tracker.Get(d.GetResource(), d.GetNamespace(), d.Name)
	if err != nil {
		return true, nil, err
	}
	cm, _ := meta.Accessor(cur)
	if p := d.DeleteOptions.Preconditions; p != nil {
		if (p.UID != nil && *p.UID != cm.GetUID()) || (p.ResourceVersion != nil && *p.ResourceVersion != cm.GetResourceVersion()) {
			return true, nil, apierrors.NewConflict(d.GetResource().GroupResource(), d.Name, fmt.Errorf("precondition failed"))
		}
	}
	if a.hideDeletes {
		a.held[d.Name] = true // before the tracker tells its watchers
	}
	return true, nil, a.Tracker.Delete(d.GetResource(), d.GetNamespace(), d.Name)
}

// Actions are every request made so far, to the core kinds and to ours.
func (a *API) Actions() []k8stesting.Action {
	return append(a.Kube.Actions(), a.Ours.Actions()...)
}

// patchPrecondition refuses a patch whose metadata.uid is not the pod's,
// as the server does (the fake tracker would write the UID over): a
// patch meant for a pod deleted since must not reach its successor.
func (a *API) patchPrecondition(action k8stesting.Action) (bool, runtime.Object, error) {
	pa := action.(k8stesting.PatchAction)
	var patch struct {
		Metadata struct {
			UID types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if json.Unmarshal(pa.GetPatch(), &patch) != nil || patch.Metadata.UID == "" {
		return false, nil, nil
	}
	cur, err := a.Kube.Tracker().Get(pa.GetResource(), pa.GetNamespace(), pa.GetName())
	if err != nil {
		return false, nil, nil
	}
	if m, _ := meta.Accessor(cur); m.GetUID() != patch.Metadata.UID {
		return true, nil, apierrors.NewConflict(pa.GetResource().GroupResource(), pa.GetName(), fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", patch.Metadata.UID, m.GetUID()))
	}
	return false, nil, nil
}

// LoseNextCreate makes the next create of one of our kinds commit, but
// answer with a timeout, as when the client's deadline passes while the
// server writes; its watch event waits until echo is called, as a watch
// that lags, so that no cache shows the object meanwhile.
func (a *API) LoseNextCreate() (echo func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.loseCreates++
	return a.release
}

// HideNextCreate makes the next create of one of our kinds commit and
// answer, but its watch event wait until echo is called: a watch that
// lags behind the create's answer, as the informer's often does.
func (a *API) HideNextCreate() (echo func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hideCreates++
	return a.release
}

// HideDeletes makes every delete of one of our kinds, until echo is
// called, commit but its watch event wait: the caches keep showing what
// the server no longer has.
func (a *API) HideDeletes() (echo func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hideDeletes = true
	return a.release
}

// release sends on the watch events held, and hides no more deletes.
func (a *API) release() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hideDeletes = false
	clear(a.held)
	close(a.echo)
	a.echo = make(chan struct{})
}

// RemakeBefore deletes the claim of c's name and makes c in its place
// just before the server takes the next request of verb ("create",
// "update" or "delete") on that name: another client's delete and create
// between this client's read and its write.
func (a *API) RemakeBefore(verb string, c *v1alpha1.ExternalIPClaim) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.remakes[[2]string{verb, c.Name}] = c.DeepCopy()
}

// remakeFor carries out the remake due before this request; a.mu held.
// It writes to the tracker itself: the fake's clients wait for the
// request under way.
func (a *API) remakeFor(action k8stesting.Action, name string) {
	k := [2]string{action.GetVerb(), name}
	c := a.remakes[k]
	if c == nil {
		return
	}
	delete(a.remakes, k)
	if err := a.Tracker.Delete(action.GetResource(), "", name); err != nil && !apierrors.IsNotFound(err) {
		panic(err)
	}
	c.UID, c.ResourceVersion = "", ""
	a.stamp(c)
	if err := a.Tracker.Create(action.GetResource(), c, ""); err != nil {
		panic(err)
	}
}

// holding passes w's events on, but holds back those of the names held
// (and, to keep the order, every one after them) until echo is closed.
func (a *API) holding(w watch.Interface) watch.Interface {
	out := make(chan watch.Event)
	pw := watch.NewProxyWatcher(out)
	go func() {
		defer w.Stop()
		var queued []watch.Event
		for {
			a.mu.Lock()
			echo := a.echo
			a.mu.Unlock()
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					close(out)
					return
				}
				if len(queued) > 0 || a.isHeld(ev.Object) {
					queued = append(queued, ev)
					continue
				}
				queued = []watch.Event{ev}
			case <-echo:
			case <-pw.StopChan():
				return
			}
			for len(queued) > 0 && !a.isHeld(queued[0].Object) {
				select {
				case out <- queued[0]:
					queued = queued[1:]
				case <-pw.StopChan():
					return
				}
			}
		}
	}()
	return pw
}

func (a *API) isHeld(o runtime.Object) bool {
	m, err := meta.Accessor(o)
	if err != nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.held[m.GetName()]
}
