package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims"
	"github.com/external-ip/external-ip/pkg/claims/apiclient"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
	"github.com/external-ip/external-ip/pkg/claims/leader"
	"github.com/external-ip/external-ip/pkg/nodeapi"
	"github.com/external-ip/external-ip/pkg/store"
)

// request is one API request as RBAC sees it.
type request struct {
	group, resource, verb, namespace, name string
	patch                                  []byte // a patch's body
}

func (r request) String() string {
	return fmt.Sprintf("%s %s.%s %s/%s", r.verb, r.resource, r.group, r.namespace, r.name)
}

func requestOf(a k8stesting.Action) request {
	r := request{group: a.GetResource().Group, resource: a.GetResource().Resource, verb: a.GetVerb(), namespace: a.GetNamespace()}
	if s := a.GetSubresource(); s != "" {
		r.resource += "/" + s
	}
	// A patch has a name too (it is a GetAction): it comes first.
	switch a := a.(type) {
	case k8stesting.PatchAction:
		r.name, r.patch = a.GetName(), a.GetPatch()
	case k8stesting.GetAction:
		r.name = a.GetName()
	case k8stesting.DeleteAction:
		r.name = a.GetName()
	case k8stesting.UpdateAction:
		if m, err := metaName(a.GetObject()); err == nil {
			r.name = m
		}
	}
	return r
}

func metaName(o runtime.Object) (string, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return "", fmt.Errorf("no metadata")
	}
	return m.GetName(), nil
}

// allows says whether the rule lets the request through, as RBAC's
// RuleAllows does for the fields we use.
func allows(rule rbacv1.PolicyRule, r request) bool {
	if !slices.Contains(rule.APIGroups, r.group) || !slices.Contains(rule.Resources, r.resource) || !slices.Contains(rule.Verbs, r.verb) {
		return false
	}
	return len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, r.name)
}

// nodeScenario drives one node process through what it does: claims from a
// pool and by name, a refusal twice, joins after a conflict, releases, a
// pod and a StatefulSet gone while the node was down, a new pool; and
// returns every request it made of the API server, and the pods as they
// were before it (by namespace/name).
func nodeScenario(t *testing.T) ([]request, map[string]*corev1.Pod) {
	t.Helper()
	set := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db", UID: "sts-uid"}}
	web, gone := testPod("a", "web", "n1"), testPod("a", "gone", "n1")
	db0 := testPod("a", "db-0", "n1")
	db0.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "db", UID: "sts-uid", Controller: ptr(true)}}
	api := claimstest.New(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, set, web, gone, db0,
		&v1alpha1.ExternalIPPool{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1alpha1.ExternalIPPoolSpec{
			Ranges: []v1alpha1.Range{"192.0.2.0/24"}, NamespaceSelector: &metav1.LabelSelector{}}})
	// Namespaces made from now on reach no cache: the node reads them live.
	api.Kube.PrependWatchReactor("namespaces", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	// One update of a claim loses to another writer: the node reads it live.
	conflicted := false
	api.Ours.PrependReactor("update", v1alpha1.ClaimResource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "" && !conflicted {
			conflicted = true
			return true, nil, apierrors.NewConflict(v1alpha1.Claims.GroupResource(), "x", fmt.Errorf("stale"))
		}
		return false, nil, nil
	})
	dir := t.TempDir()
	n := claims.New(claims.Config{Clients: &apiclient.Clients{Kube: api.Kube, Pools: api.Pools, Claims: api.Claims},
		NodeName: "n1", DataDir: dir, Namespace: "external-ip", Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		LocalEvery: 20 * time.Millisecond, SweepEvery: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	ask := func(p *corev1.Pod, pool string, addrs ...string) nodeapi.Response {
		req := nodeapi.Request{Op: nodeapi.OpClaim, Attachment: store.Attachment{Network: "pods", ContainerID: string(p.UID), IfName: "eth0"},
			Pod: nodeapi.Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}, Pool: pool}
		for _, a := range addrs {
			req.Addresses = append(req.Addresses, netip.MustParseAddr(a))
		}
		if err := nodeapi.MarkIntent(dir, nodeapi.Marker{Attachment: req.Attachment, Pod: req.Pod}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp := n.Handle(ctx, req)
			if resp.Unavailable == "" || time.Now().After(deadline) {
				return resp
			}
			time.Sleep(10 * time.Millisecond) // the caches not synced yet
		}
	}
	ask(web, "p")
	ask(web, "p", "192.0.2.200") // joins its own claim: the conflict, then a live read
	ask(gone, "p")
	ask(db0, "p")
	ask(web, "nope")
	ask(web, "nope") // the same refusal again: the event's count is patched
	// What others do, straight into the trackers (not among the node's
	// requests): a namespace no cache has, a pod in it, a pod and a
	// StatefulSet deleted while the node was down, a new pool.
	kube := api.Kube.Tracker()
	must(t, kube.Create(corev1.SchemeGroupVersion.WithResource("namespaces"), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, ""))
	other := testPod("b", "other", "n1")
	must(t, kube.Create(corev1.SchemeGroupVersion.WithResource("pods"), other, "b"))
	ask(other, "p")
	n.Release(ctx, store.Attachment{Network: "pods", ContainerID: string(db0.UID), IfName: "eth0"})
	must(t, kube.Delete(corev1.SchemeGroupVersion.WithResource("pods"), "a", "gone"))
	must(t, kube.Delete(appsv1.SchemeGroupVersion.WithResource("statefulsets"), "a", "db"))
	must(t, api.Tracker.Add(&v1alpha1.ExternalIPPool{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: v1alpha1.ExternalIPPoolSpec{
		Ranges: []v1alpha1.Range{"198.51.100.0/24"}}}))
	var state string
	waitUntil(t, "the leader's work done", func() bool {
		cm, err := api.Kube.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "external-ip", leader.PolicyParams)
		l, _ := api.Tracker.List(v1alpha1.Claims, v1alpha1.SchemeGroupVersion.WithKind(v1alpha1.ClaimKind), "")
		var names []string
		if l != nil {
			for _, c := range l.(*v1alpha1.ExternalIPClaimList).Items {
				names = append(names, c.Name)
			}
		}
		state = fmt.Sprintf("configmap %v %v, claims %v, event patched %v", cm, err, names, eventPatched(api))
		return err == nil && cm.(*corev1.ConfigMap).Data["q"] != "" && len(names) == 3 && eventPatched(api)
	}, &state)
	time.Sleep(100 * time.Millisecond) // a lease renewal or two
	var out []request
	for _, a := range api.Actions() {
		out = append(out, requestOf(a))
	}
	pods := map[string]*corev1.Pod{}
	for _, p := range []*corev1.Pod{web, gone, db0, other} {
		pods[p.Namespace+"/"+p.Name] = p
	}
	return out, pods
}

func eventPatched(api *claimstest.API) bool {
	return slices.ContainsFunc(api.Kube.Actions(), func(a k8stesting.Action) bool {
		return a.GetVerb() == "patch" && a.GetResource().Resource == "events"
	})
}

func testPod(ns, name, nodeName string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: corev1.PodSpec{NodeName: nodeName}}
}

func ptr[T any](v T) *T { return &v }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool, state *string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, *state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTheRBACRulesAllowExactlyWhatTheNodeProcessDoes(t *testing.T) {
	all := manifests(t)
	cr := all["clusterrole.yaml"].(*rbacv1.ClusterRole)
	role := all["role.yaml"].(*rbacv1.Role)
	if role.Namespace != "external-ip" {
		t.Fatalf("role.yaml's namespace %q", role.Namespace)
	}
	used := map[string]bool{}
	reqs, pods := nodeScenario(t)
	checkPodWrites(t, reqs, pods)
	for _, r := range reqs {
		rules := cr.Rules
		if r.namespace == role.Namespace {
			rules = append(slices.Clone(rules), role.Rules...)
		}
		i := slices.IndexFunc(rules, func(rule rbacv1.PolicyRule) bool { return allows(rule, r) })
		if i < 0 {
			t.Errorf("the node process made a request RBAC refuses: %s", r)
			continue
		}
		used[ruleKey(rules[i], r)] = true
	}
	for file, rules := range map[string][]rbacv1.PolicyRule{"clusterrole.yaml": cr.Rules, "role.yaml": role.Rules} {
		for _, rule := range rules {
			for _, res := range rule.Resources {
				for _, verb := range rule.Verbs {
					r := request{group: rule.APIGroups[0], resource: res, verb: verb}
					if !used[ruleKey(rule, r)] {
						t.Errorf("%s grants %s %s.%s, which the node process never did", file, verb, res, rule.APIGroups[0])
					}
				}
			}
		}
	}
}

func ruleKey(rule rbacv1.PolicyRule, r request) string {
	return strings.Join([]string{r.group, r.resource, r.verb, strings.Join(rule.ResourceNames, ",")}, " ")
}

func TestTheBindingsBindTheRolesToTheDaemonSetsAccount(t *testing.T) {
	all := manifests(t)
	sa := all["serviceaccount.yaml"].(*corev1.ServiceAccount)
	if got := daemonSet(t).ServiceAccountName; got != sa.Name {
		t.Errorf("the DaemonSet runs as %q, the ServiceAccount is %q", got, sa.Name)
	}
	crb := all["clusterrolebinding.yaml"].(*rbacv1.ClusterRoleBinding)
	rb := all["rolebinding.yaml"].(*rbacv1.RoleBinding)
	for _, b := range []struct {
		ref      rbacv1.RoleRef
		subjects []rbacv1.Subject
		want     string
	}{{crb.RoleRef, crb.Subjects, all["clusterrole.yaml"].(*rbacv1.ClusterRole).Name}, {rb.RoleRef, rb.Subjects, all["role.yaml"].(*rbacv1.Role).Name}} {
		if b.ref.Name != b.want || len(b.subjects) != 1 || b.subjects[0].Kind != "ServiceAccount" || b.subjects[0].Name != sa.Name || b.subjects[0].Namespace != sa.Namespace {
			t.Errorf("binding of %s: %+v %+v", b.want, b.ref, b.subjects)
		}
	}
}

// checkPodWrites evaluates policy-node-pods.yaml on every pod write the
// node process made, as the API server would with the token of its node:
// each must be admitted, or the node process writes what the policy
// refuses. And one of them must have been made.
func checkPodWrites(t *testing.T, reqs []request, pods map[string]*corev1.Pod) {
	t.Helper()
	p := policy(t, "policy-node-pods.yaml")
	writes := 0
	for _, r := range reqs {
		if r.group != "" || !strings.HasPrefix(r.resource, "pods") || r.verb != "patch" {
			continue
		}
		writes++
		orig, err := json.Marshal(pods[r.namespace+"/"+r.name])
		must(t, err)
		patched, err := jsonpatch.MergePatch(orig, r.patch)
		if err != nil {
			t.Fatalf("%s: %s: %v", r, r.patch, err)
		}
		var old, obj map[string]any
		must(t, json.Unmarshal(orig, &old))
		must(t, json.Unmarshal(patched, &obj))
		sub, _ := strings.CutPrefix(r.resource, "pods/")
		if sub == r.resource {
			sub = ""
		}
		msgs, matched := evaluate(t, p, admission{object: obj, oldObject: old, request: nodePodRequest(nodeProcessUser(t), "n1", sub)})
		if !matched || len(msgs) > 0 {
			t.Errorf("the node process's %s (%s) is refused by policy-node-pods.yaml: %q (matched %v)", r, r.patch, msgs, matched)
		}
	}
	if writes == 0 {
		t.Error("the node process wrote no pod: its annotation is not checked against the policy")
	}
}

// Every pod write RBAC grants the node process must be one that
// policy-node-pods.yaml bounds: a wider grant (delete, create, a
// subresource, a wildcard) fails here until the policy covers it.
func TestEveryPodWriteTheClusterRoleGrantsIsBoundedByTheNodePodPolicy(t *testing.T) {
	all := manifests(t)
	p := policy(t, "policy-node-pods.yaml")
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("policy-node-pods.yaml: failurePolicy %v, want Fail (an error must refuse)", p.Spec.FailurePolicy)
	}
	// The account's name, in any namespace: the manifests may be applied
	// in another.
	sa := all["serviceaccount.yaml"].(*corev1.ServiceAccount)
	if want := "request.userInfo.username.matches('^system:serviceaccount:[^:]+:" + sa.Name + "$')"; len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Expression != want {
		t.Errorf("policy-node-pods.yaml matches %+v; want the requests of ServiceAccount %s of any namespace alone: %s", p.Spec.MatchConditions, sa.Name, want)
	}
	ops := map[string]admissionregistrationv1.OperationType{"patch": admissionregistrationv1.Update, "update": admissionregistrationv1.Update,
		"create": admissionregistrationv1.Create, "delete": admissionregistrationv1.Delete, "deletecollection": admissionregistrationv1.Delete}
	bounded := func(resource string, op admissionregistrationv1.OperationType) bool {
		return slices.ContainsFunc(p.Spec.MatchConstraints.ResourceRules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
			sub := strings.HasPrefix(resource, "pods/") && slices.Contains(r.Resources, "pods/*")
			return slices.Contains(r.APIGroups, "") && slices.Contains(r.Operations, op) && (slices.Contains(r.Resources, resource) || sub)
		})
	}
	for _, rule := range all["clusterrole.yaml"].(*rbacv1.ClusterRole).Rules {
		for _, res := range rule.Resources {
			if !slices.Contains(rule.APIGroups, "") && !slices.Contains(rule.APIGroups, "*") || res != "*" && res != "pods" && !strings.HasPrefix(res, "pods/") {
				continue
			}
			for _, verb := range rule.Verbs {
				if verb == "get" || verb == "list" || verb == "watch" {
					continue
				}
				if op, ok := ops[verb]; !ok || res == "*" || !bounded(res, op) {
					t.Errorf("clusterrole.yaml grants %s %s, which policy-node-pods.yaml does not bound", verb, res)
				}
			}
		}
	}
}
