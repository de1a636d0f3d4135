package kubernetes

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"go4.org/netipx"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/external-ip/external-ip/pkg/claims/leader"
	"github.com/external-ip/external-ip/pkg/pools/iprange"
)

// policy reads a shipped ValidatingAdmissionPolicy.
func policy(t *testing.T, file string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var p admissionregistrationv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return &p
}

// admission is one request as a policy sees it; request, when set, is
// the whole request variable (else one of the namespace, a CREATE or,
// with an oldObject, an UPDATE).
type admission struct {
	object, oldObject, params, namespaceObject map[string]any
	request                                    map[string]any
	namespace                                  string
}

// evaluate runs a policy's match conditions, variables and validations in
// the CEL environment of the oldest release its header says it needs (the
// API server's own libraries), as the API server does with untyped
// objects, and returns the messages of the validations that fail; matched
// is false when a match condition excludes the request.
func evaluate(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy, a admission) (msgs []string, matched bool) {
	t.Helper()
	oldest := policyNeeds(t, policyFile(p.Name))
	env, err := policyEnv(oldest)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{}
	req := a.request
	if req == nil {
		req = map[string]any{"namespace": a.namespace, "operation": "CREATE"}
		if a.oldObject != nil {
			req["operation"] = "UPDATE"
		}
	}
	var old any
	if a.oldObject != nil {
		old = a.oldObject
	}
	act := map[string]any{"object": a.object, "oldObject": old, "params": a.params, "namespaceObject": a.namespaceObject,
		"request": req, "variables": vars}
	run := func(what, expr string) any {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s %s: does not compile in Kubernetes %s: %v", p.Name, what, oldest, iss.Err())
		}
		prg, err := env.Program(ast, cel.CostLimit(1000000))
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(act)
		if err != nil {
			t.Fatalf("%s %s: %v", p.Name, what, err)
		}
		return out.Value()
	}
	for _, m := range p.Spec.MatchConditions {
		if run("matchCondition "+m.Name, m.Expression) != true {
			return nil, false
		}
	}
	for _, v := range p.Spec.Variables {
		vars[v.Name] = run("variable "+v.Name, v.Expression)
	}
	for i, v := range p.Spec.Validations {
		if run(fmt.Sprintf("validation %d", i), v.Expression) == true {
			continue
		}
		msg := v.Message
		if v.MessageExpression != "" {
			msg = fmt.Sprint(run(fmt.Sprintf("validation %d's message", i), v.MessageExpression))
		}
		msgs = append(msgs, msg)
	}
	return msgs, true
}

func poolParams(name string, ranges []string, extra map[string]any) map[string]any {
	spec := map[string]any{"ranges": toAny(ranges)}
	for k, v := range extra {
		spec[k] = v
	}
	return map[string]any{"metadata": map[string]any{"name": name}, "spec": spec}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func TestThePoolPolicyRefusesReversedAndOverlappingRangesNamingThem(t *testing.T) {
	p := policy(t, "policy-pool-ranges.yaml")
	for _, tc := range []struct {
		ranges []string
		want   string
	}{
		{[]string{"192.0.2.0/28", "192.0.2.16-192.0.2.20", "2001:db8::/64", "2001:db8:1::9-2001:db8:1::a"}, ""},
		{[]string{"192.0.2.20-192.0.2.3"}, "spec.ranges: 192.0.2.20-192.0.2.3 has first after last"},
		{[]string{"192.0.2.9-192.0.2.10"}, ""},
		{[]string{"2001:db8::a-2001:db8::9"}, "spec.ranges: 2001:db8::a-2001:db8::9 has first after last"},
		{[]string{"2001:db8:1::-2001:db8::ffff"}, "has first after last"},
		{[]string{"2001:db8::ffff-2001:db8::1:0"}, ""},
		{[]string{"::1:0:0:1-::1:0:0:2"}, ""},
		{[]string{"192.0.2.0/24", "192.0.2.128/25"}, "spec.ranges: 192.0.2.0/24 and 192.0.2.128/25 overlap"},
		{[]string{"192.0.2.0/28", "192.0.2.10-192.0.2.20"}, "spec.ranges: 192.0.2.0/28 and 192.0.2.10-192.0.2.20 overlap"},
		{[]string{"192.0.2.1-192.0.2.40", "192.0.2.16/28"}, "spec.ranges: 192.0.2.1-192.0.2.40 and 192.0.2.16/28 overlap"},
		{[]string{"192.0.2.1-192.0.2.15", "192.0.2.16/28"}, ""},
		{[]string{"2001:db8::1-2001:db8::5", "2001:db8::5-2001:db8::9"}, "2001:db8::1-2001:db8::5 and 2001:db8::5-2001:db8::9 overlap"},
		{[]string{"192.0.2.0/24", "2001:db8::/24"}, ""},
	} {
		msgs, _ := evaluate(t, p, admission{object: poolParams("p", tc.ranges, nil)})
		if tc.want == "" && len(msgs) > 0 || tc.want != "" && !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
			t.Errorf("ranges %q: %q, want %q", tc.ranges, msgs, tc.want)
		}
	}
}

// The pool policy refuses a range that covers a class of address no
// external IP may be, naming the first class it covers, exactly as the
// node processes do (package iprange): ranges at and around every class's
// bounds, as CIDRs and as first-last, are judged by both.
func TestThePoolPolicyRefusesRangesOfUnusableAddressesAsTheNodesDo(t *testing.T) {
	p := policy(t, "policy-pool-ranges.yaml")
	refused, passed := 0, 0
	for _, text := range aroundUnusable() {
		rs, err := iprange.ParseRanges([]string{text})
		if err != nil {
			continue // the CRD's schema refuses it before the policy
		}
		want := ""
		if what := iprange.Unusable(rs[0]); what != "" {
			want, refused = "spec.ranges: "+text+" holds "+what, refused+1
		} else {
			passed++
		}
		msgs, _ := evaluate(t, p, admission{object: poolParams("p", []string{text}, nil)})
		if got := strings.Join(msgs, "\n"); got != want {
			t.Errorf("range %s: %q, want %q", text, got, want)
		}
	}
	if refused < 20 || passed < 20 {
		t.Errorf("%d ranges refused and %d passed: the samples miss one side", refused, passed)
	}
}

// aroundUnusable are ranges at and around the bounds of every class of
// address no external IP may be: the class, its parent and the blocks of
// its length beside it as CIDRs; single addresses beside it; first-last
// ranges that end at its first IP, begin at its last, and stop just short
// of it on either side.
func aroundUnusable() []string {
	out := []string{"::fffe:0:0-::1:0:0:0"}
	cidr := func(a netip.Addr, bits int) {
		if a.IsValid() && bits >= 0 {
			out = append(out, netip.PrefixFrom(a, bits).Masked().String())
		}
	}
	span := func(a, b netip.Addr) {
		if a.IsValid() && b.IsValid() {
			out = append(out, a.String()+"-"+b.String())
		}
	}
	for _, c := range iprange.Classes() {
		r, bits := netipx.RangeOfPrefix(c.Prefix), c.Prefix.Bits()
		first, last := r.From(), r.To()
		cidr(first, bits)
		cidr(first, bits-1)
		cidr(first.Prev(), bits)
		cidr(last.Next(), bits)
		cidr(first.Prev(), first.BitLen())
		cidr(last.Next(), last.BitLen())
		span(first.Prev(), first)
		span(last, last.Next())
		span(first.Prev().Prev(), first.Prev())
		span(last.Next(), last.Next().Next())
	}
	return out
}

func TestThePoolOverlapPolicyRefusesAPoolThatSharesAnIPWithAnotherNamingBoth(t *testing.T) {
	p := policy(t, "policy-pool-overlaps.yaml")
	other := poolParams("old", []string{"192.0.2.0/28", "2001:db8::100-2001:db8::1ff"}, nil)
	for _, tc := range []struct {
		name   string
		ranges []string
		want   string
	}{
		{"new", []string{"192.0.2.16/28", "2001:db8::200/120"}, ""},
		{"new", []string{"198.51.100.0/24", "192.0.2.8-192.0.2.20"}, "spec.ranges: 192.0.2.8-192.0.2.20 overlaps 192.0.2.0/28 of pool old: pools may not share an IP"},
		{"new", []string{"192.0.2.0/24"}, "spec.ranges: 192.0.2.0/24 overlaps 192.0.2.0/28 of pool old"},
		{"new", []string{"2001:db8::/112"}, "spec.ranges: 2001:db8::/112 overlaps 2001:db8::100-2001:db8::1ff of pool old"},
		{"new", []string{"2001:db8::1ff-2001:db8::300"}, "overlaps 2001:db8::100-2001:db8::1ff of pool old"},
		{"new", []string{"2001:db8::200-2001:db8::300"}, ""},
		// An update of the pool itself is compared with others only.
		{"old", []string{"192.0.2.0/27"}, ""},
	} {
		msgs, _ := evaluate(t, p, admission{object: poolParams(tc.name, tc.ranges, nil), params: other})
		if tc.want == "" && len(msgs) > 0 || tc.want != "" && !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
			t.Errorf("pool %s %q: %q, want %q", tc.name, tc.ranges, msgs, tc.want)
		}
	}
}

func podObject(annotations map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": "web", "annotations": annotations}}
}

func TestThePodPolicyRefusesANamespaceThePoolDoesNotAdmit(t *testing.T) {
	p := policy(t, "policy-pod-namespaces.yaml")
	web := poolParams("web", []string{"192.0.2.0/28", "2001:db8::10-2001:db8::20"}, map[string]any{
		"namespaces": []any{"team-a"},
		"namespaceSelector": map[string]any{
			"matchLabels":      map[string]any{"tier": "web"},
			"matchExpressions": []any{map[string]any{"key": "env", "operator": "NotIn", "values": []any{"test"}}},
		},
	})
	ns := func(labels map[string]any) map[string]any {
		return map[string]any{"metadata": map[string]any{"labels": labels}}
	}
	for _, tc := range []struct {
		namespace   string
		labels      map[string]any
		annotations map[string]any
		want        string
	}{
		{"team-a", nil, map[string]any{"external-ip/pool": "web"}, ""},
		{"team-b", map[string]any{"tier": "web"}, map[string]any{"external-ip/pool": "web"}, ""},
		{"team-b", map[string]any{"tier": "web", "env": "test"}, map[string]any{"external-ip/pool": "web"}, "external-ip/pool: pool web does not admit namespace team-b"},
		{"team-b", nil, map[string]any{"external-ip/pool": "web"}, "external-ip/pool: pool web does not admit namespace team-b"},
		{"team-b", nil, map[string]any{"external-ip/pool": "other"}, ""},
		{"team-b", nil, map[string]any{"external-ip/addresses": "198.51.100.1, 2001:DB8::11"}, "external-ip/addresses: 2001:DB8::11: pool web does not admit namespace team-b"},
		{"team-b", nil, map[string]any{"external-ip/addresses": "192.0.2.99,2001:db8::21"}, ""},
	} {
		msgs, matched := evaluate(t, p, admission{object: podObject(tc.annotations), params: web, namespace: tc.namespace, namespaceObject: ns(tc.labels)})
		if !matched || tc.want == "" && len(msgs) > 0 || tc.want != "" && !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
			t.Errorf("namespace %s %v asking %v: %q (matched %v), want %q", tc.namespace, tc.labels, tc.annotations, msgs, matched, tc.want)
		}
	}
	if _, matched := evaluate(t, p, admission{object: podObject(map[string]any{"other": "x"}), params: web}); matched {
		t.Error("a pod that asks for no external IP is matched")
	}
}

func TestThePodPolicyRefusesAnUnknownPoolAndAnIPInNoPool(t *testing.T) {
	p := policy(t, "policy-pod-pools.yaml")
	published := map[string]any{"data": map[string]any{
		"web": "4192.000.002.000-4192.000.002.015,62001:0db8:0000:0000:0000:0000:0000:0010-62001:0db8:0000:0000:0000:0000:0000:0020",
	}}
	for _, tc := range []struct {
		params      map[string]any
		annotations map[string]any
		want        string
	}{
		{published, map[string]any{"external-ip/pool": "web"}, ""},
		{published, map[string]any{"external-ip/pool": "nope"}, "external-ip/pool: no pool named nope (kubectl get externalippools)"},
		{published, map[string]any{"external-ip/addresses": "192.0.2.15,2001:db8::1f"}, ""},
		{published, map[string]any{"external-ip/addresses": "192.0.2.16"}, "external-ip/addresses: 192.0.2.16: lies in no pool"},
		{published, map[string]any{"external-ip/addresses": "2001:db8::21"}, "external-ip/addresses: 2001:db8::21: lies in no pool"},
		{published, map[string]any{"external-ip/addresses": "192.0.2.300"}, "external-ip/addresses: 192.0.2.300 is not an IP address"},
		// No pool at all: the IPs a pod names are allowedRanges' to judge.
		{map[string]any{}, map[string]any{"external-ip/addresses": "203.0.113.1"}, ""},
		{map[string]any{}, map[string]any{"external-ip/pool": "web"}, "external-ip/pool: no pool named web"},
	} {
		msgs, _ := evaluate(t, p, admission{object: podObject(tc.annotations), params: tc.params, namespace: "a"})
		if tc.want == "" && len(msgs) > 0 || tc.want != "" && !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
			t.Errorf("%v with %v: %q, want %q", tc.annotations, tc.params, msgs, tc.want)
		}
	}
}

func TestTheBindingsNameThePoliciesAndTheParametersTheNodeProcessKeeps(t *testing.T) {
	all := manifests(t)
	policies := map[string]*admissionregistrationv1.ValidatingAdmissionPolicy{}
	for f, o := range all {
		if p, ok := o.(*admissionregistrationv1.ValidatingAdmissionPolicy); ok {
			policies[p.Name] = p
			if b, ok := all[strings.TrimSuffix(f, ".yaml")+"-binding.yaml"].(*admissionregistrationv1.ValidatingAdmissionPolicyBinding); !ok || b.Spec.PolicyName != p.Name {
				t.Errorf("%s: no binding of it in %s-binding.yaml", f, strings.TrimSuffix(f, ".yaml"))
			}
		}
	}
	if len(policies) != 5 {
		t.Errorf("%d policies, want 5", len(policies))
	}
	for f, o := range all {
		b, ok := o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		if !ok {
			continue
		}
		p := policies[b.Spec.PolicyName]
		if p == nil || len(b.Spec.ValidationActions) != 1 || b.Spec.ValidationActions[0] != admissionregistrationv1.Deny {
			t.Errorf("%s: binds %q with %v", f, b.Spec.PolicyName, b.Spec.ValidationActions)
			continue
		}
		if (p.Spec.ParamKind == nil) != (b.Spec.ParamRef == nil) {
			t.Errorf("%s: the policy's paramKind %v, the binding's paramRef %v", f, p.Spec.ParamKind, b.Spec.ParamRef)
		}
		if p.Spec.ParamKind != nil && p.Spec.ParamKind.Kind == "ConfigMap" &&
			(b.Spec.ParamRef.Name != leader.PolicyParams || b.Spec.ParamRef.Namespace != daemonSetNamespace(t)) {
			t.Errorf("%s: reads ConfigMap %s/%s; the leader writes %s/%s", f, b.Spec.ParamRef.Namespace, b.Spec.ParamRef.Name, daemonSetNamespace(t), leader.PolicyParams)
		}
	}
	role := all["role.yaml"].(*rbacv1.Role)
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.ResourceNames, leader.LeaseName) }) ||
		!slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.ResourceNames, leader.PolicyParams) }) {
		t.Errorf("role.yaml names neither the Lease %s nor the ConfigMap %s", leader.LeaseName, leader.PolicyParams)
	}
}

func daemonSetNamespace(t *testing.T) string {
	t.Helper()
	for _, e := range daemonSet(t).Containers[0].Env {
		if e.Name == "POD_NAMESPACE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
			return manifests(t)["daemonset.yaml"].(*appsv1.DaemonSet).Namespace
		}
	}
	t.Fatal("the DaemonSet does not pass its namespace to --namespace")
	return ""
}

// nodeProcessUser is the username of the DaemonSet's ServiceAccount.
func nodeProcessUser(t *testing.T) string {
	t.Helper()
	sa := manifests(t)["serviceaccount.yaml"].(*corev1.ServiceAccount)
	return "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
}

// inNamespace is the username of user's ServiceAccount in namespace ns.
func inNamespace(user, ns string) string {
	parts := strings.Split(user, ":")
	return strings.Join([]string{parts[0], parts[1], ns, parts[3]}, ":")
}

// nodePodRequest is a pod UPDATE by user, its token bound to node (none:
// no extra at all), on subresource sub.
func nodePodRequest(user, node, sub string) map[string]any {
	info := map[string]any{"username": user}
	if node != "" {
		info["extra"] = map[string]any{"authentication.kubernetes.io/node-name": []any{node}}
	}
	r := map[string]any{"operation": "UPDATE", "namespace": "a", "userInfo": info}
	if sub != "" {
		r["subResource"] = sub
	}
	return r
}

// runningPod is a pod of node n1 as the API server stores it, with
// annotations, labels and an owner of its own.
func runningPod(t *testing.T) map[string]any {
	t.Helper()
	p := testPod("a", "web-0", "n1")
	p.ResourceVersion, p.Generation = "41", 1
	p.Labels = map[string]string{"app": "web"}
	p.Annotations = map[string]string{"external-ip/pool": "web", "team": "a"}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: "sts", Controller: ptr(true)}}
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}}
	p.Spec.Containers = []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}
	p.Spec.ServiceAccountName = "default"
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP = "10.0.0.5"
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestTheNodePodPolicyLetsTheNodeProcessWriteOnlyItsAnnotationAndLabelOnPodsOfItsNode(t *testing.T) {
	p := policy(t, "policy-node-pods.yaml")
	user := nodeProcessUser(t)
	set := func(o map[string]any, v any, path ...string) {
		if err := unstructured.SetNestedField(o, v, path...); err != nil {
			t.Fatal(err)
		}
	}
	// ours is what the node process's merge patch leaves, with what the
	// API server itself changes on a write.
	ours := func(o map[string]any) {
		set(o, "192.0.2.1,2001:db8::1", "metadata", "annotations", "external-ip/assigned")
		set(o, "true", "metadata", "labels", "external-ip.io/holder")
		set(o, "42", "metadata", "resourceVersion")
		set(o, []any{map[string]any{"manager": "external-ip-node", "operation": "Update"}}, "metadata", "managedFields")
	}
	for _, tc := range []struct {
		name       string
		node, sub  string
		old, edit  func(map[string]any)
		want       string
		notMatched bool
		user       string
	}{
		{name: "its annotation and label written", node: "n1", edit: ours},
		{name: "its annotation and label taken off", node: "n1", old: ours, edit: func(o map[string]any) {
			unstructured.RemoveNestedField(o, "metadata", "annotations", "external-ip/assigned")
			unstructured.RemoveNestedField(o, "metadata", "labels", "external-ip.io/holder")
		}},
		{name: "the image changed", node: "n1", edit: func(o map[string]any) {
			ours(o)
			set(o, []any{map[string]any{"name": "web", "image": "evil.example/web:1"}}, "spec", "containers")
		}, want: "may change only a pod's annotation external-ip/assigned and label external-ip.io/holder"},
		{name: "another label", node: "n1", edit: func(o map[string]any) { ours(o); set(o, "evil", "metadata", "labels", "app") }, want: "may change only"},
		{name: "a label added", node: "n1", edit: func(o map[string]any) { set(o, "x", "metadata", "labels", "other") }, want: "may change only"},
		{name: "another annotation", node: "n1", edit: func(o map[string]any) { set(o, "b", "metadata", "annotations", "team") }, want: "may change only"},
		{name: "the pool asked for", node: "n1", edit: func(o map[string]any) { set(o, "other", "metadata", "annotations", "external-ip/pool") }, want: "may change only"},
		{name: "an annotation taken off", node: "n1", edit: func(o map[string]any) { unstructured.RemoveNestedField(o, "metadata", "annotations", "team") }, want: "may change only"},
		{name: "the owner taken off", node: "n1", edit: func(o map[string]any) { unstructured.RemoveNestedField(o, "metadata", "ownerReferences") }, want: "may change only"},
		{name: "a finalizer added", node: "n1", edit: func(o map[string]any) { set(o, []any{"x"}, "metadata", "finalizers") }, want: "may change only"},
		{name: "the status", node: "n1", edit: func(o map[string]any) { set(o, "Failed", "status", "phase") }, want: "may change only"},
		{name: "the service account", node: "n1", edit: func(o map[string]any) { set(o, "admin", "spec", "serviceAccountName") }, want: "may change only"},
		{name: "a pod of another node", node: "n2", edit: ours, want: "spec.nodeName: n1: external-ip-node of node n2 may change only the pods of its node"},
		{name: "a pod of no node", node: "n1", old: func(o map[string]any) { unstructured.RemoveNestedField(o, "spec", "nodeName") },
			edit: ours, want: "spec.nodeName: (none): external-ip-node of node n1"},
		{name: "a token with no node", edit: ours, want: "external-ip-node's token names no node"},
		{name: "the status subresource", node: "n1", sub: "status", edit: ours, want: "pods/status: external-ip-node writes no subresource of a pod"},
		{name: "the ephemeral containers", node: "n1", sub: "ephemeralcontainers", edit: ours, want: "pods/ephemeralcontainers:"},
		{name: "another user's write", user: "system:serviceaccount:kube-system:replicaset-controller", edit: func(o map[string]any) {
			set(o, []any{map[string]any{"name": "web", "image": "registry.example/web:2"}}, "spec", "containers")
		}, notMatched: true},
		// Applied in another namespace, our account is bounded all the same.
		{name: "its write, applied in another namespace", node: "n1", user: inNamespace(user, "infra"), edit: ours},
		{name: "the image, applied in another namespace", node: "n1", user: inNamespace(user, "infra"), edit: func(o map[string]any) {
			set(o, []any{map[string]any{"name": "web", "image": "evil.example/web:1"}}, "spec", "containers")
		}, want: "may change only"},
		{name: "a pod of another node, applied in another namespace", node: "n2", user: inNamespace(user, "infra"), edit: ours, want: "may change only the pods of its node"},
		{name: "another account of its namespace", user: strings.TrimSuffix(user, ":external-ip") + ":default", edit: func(o map[string]any) {
			set(o, "x", "metadata", "labels", "other")
		}, notMatched: true},
		{name: "an account whose name ends in its", user: inNamespace(user, "a") + "-2", edit: func(o map[string]any) {
			set(o, "x", "metadata", "labels", "other")
		}, notMatched: true},
		{name: "an account named like its namespace", user: "system:serviceaccount:external-ip:x", edit: func(o map[string]any) {
			set(o, "x", "metadata", "labels", "other")
		}, notMatched: true},
	} {
		old := runningPod(t)
		if tc.old != nil {
			tc.old(old)
		}
		obj := runtime.DeepCopyJSON(old)
		tc.edit(obj)
		u := user
		if tc.user != "" {
			u = tc.user
		}
		msgs, matched := evaluate(t, p, admission{object: obj, oldObject: old, request: nodePodRequest(u, tc.node, tc.sub)})
		if matched == tc.notMatched || tc.want == "" && len(msgs) > 0 || tc.want != "" && !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
			t.Errorf("%s: %q (matched %v), want %q", tc.name, msgs, matched, tc.want)
		}
	}
}

// A pod made without our annotations and given them by an update before
// its sandbox is made is judged as one created with them; an update that
// leaves them as they were is not judged at all (a pool deleted since
// must not block a pod's label change, nor the node's own annotation).
func TestThePodPoliciesJudgeAnUpdateThatChangesTheirAnnotationsAndNoOther(t *testing.T) {
	web := poolParams("web", []string{"192.0.2.0/28"}, map[string]any{"namespaces": []any{"team-a"}})
	published := map[string]any{"data": map[string]any{"web": "4192.000.002.000-4192.000.002.015"}}
	for _, tc := range []struct {
		file     string
		params   map[string]any
		old, new map[string]any
		want     string // "": admitted; "-": not judged
	}{
		{"policy-pod-namespaces.yaml", web, nil, map[string]any{"external-ip/pool": "web"}, "external-ip/pool: pool web does not admit namespace team-b"},
		{"policy-pod-namespaces.yaml", web, map[string]any{"x": "1"}, map[string]any{"x": "1", "external-ip/addresses": "192.0.2.3"}, "external-ip/addresses: 192.0.2.3: pool web does not admit namespace team-b"},
		{"policy-pod-namespaces.yaml", web, map[string]any{"external-ip/pool": "other"}, map[string]any{"external-ip/pool": "web"}, "does not admit namespace team-b"},
		{"policy-pod-namespaces.yaml", web, map[string]any{"external-ip/pool": "web"}, map[string]any{"external-ip/pool": "web", "external-ip/assigned": "192.0.2.1"}, "-"},
		{"policy-pod-namespaces.yaml", web, map[string]any{"external-ip/pool": "web"}, map[string]any{"external-ip/pool": "other"}, ""},
		{"policy-pod-pools.yaml", published, nil, map[string]any{"external-ip/pool": "nope"}, "external-ip/pool: no pool named nope"},
		{"policy-pod-pools.yaml", published, map[string]any{"external-ip/addresses": "192.0.2.1"}, map[string]any{"external-ip/addresses": "192.0.2.99"}, "192.0.2.99: lies in no pool"},
		{"policy-pod-pools.yaml", published, map[string]any{"external-ip/pool": "gone"}, map[string]any{"external-ip/pool": "gone", "team": "b"}, "-"},
		{"policy-pod-pools.yaml", published, map[string]any{"external-ip/pool": "nope"}, map[string]any{}, "-"},
	} {
		p := policy(t, tc.file)
		old := podObject(tc.old)
		if tc.old == nil {
			old = podObject(nil)
			delete(old["metadata"].(map[string]any), "annotations")
		}
		msgs, matched := evaluate(t, p, admission{object: podObject(tc.new), oldObject: old, params: tc.params, namespace: "team-b",
			namespaceObject: map[string]any{"metadata": map[string]any{"name": "team-b"}}})
		if tc.want == "-" && matched || tc.want != "-" && !matched || tc.want == "" && len(msgs) > 0 ||
			tc.want != "" && tc.want != "-" && !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
			t.Errorf("%s: update %v to %v: %q (matched %v), want %q", tc.file, tc.old, tc.new, msgs, matched, tc.want)
		}
	}
	for _, f := range []string{"policy-pod-namespaces.yaml", "policy-pod-pools.yaml"} {
		ops := policy(t, f).Spec.MatchConstraints.ResourceRules[0].Operations
		if !slices.Contains(ops, admissionregistrationv1.Create) || !slices.Contains(ops, admissionregistrationv1.Update) {
			t.Errorf("%s matches %v; want CREATE and UPDATE", f, ops)
		}
	}
}

// The pools policy's work grows with the cluster's pools: 500 pools of 16
// IPv6 ranges each and a pod naming 8 IPv6 addresses in none of them must
// still be refused for that, not for the API server's per-call cost limit
// (1,000,000, which evaluate applies). Splitting the ranges for each IP,
// it exceeded the limit from 300 pools; now from about 600
// (docs/pools.md says so).
func TestThePoolsPolicyJudgesManyPoolsWithinTheCostLimit(t *testing.T) {
	data := map[string]any{}
	key := func(i, j, k int) string { return fmt.Sprintf("62001:0db8:%04x:%04x:0000:0000:0000:%04x", i, j, k) }
	for i := range 500 {
		var bounds []string
		for j := range 16 {
			bounds = append(bounds, key(i, j, 0)+"-"+key(i, j, 0xff))
		}
		data[fmt.Sprintf("pool-%03d", i)] = strings.Join(bounds, ",")
	}
	var named []string
	for k := range 8 {
		named = append(named, fmt.Sprintf("2001:db8:ffff::%x", k+1))
	}
	p := policy(t, "policy-pod-pools.yaml")
	msgs, _ := evaluate(t, p, admission{object: podObject(map[string]any{"external-ip/addresses": strings.Join(named, ",")}),
		params: map[string]any{"data": data}, namespace: "a"})
	if want := "external-ip/addresses: 2001:db8:ffff::1: lies in no pool"; !strings.Contains(strings.Join(msgs, "\n"), want) {
		t.Errorf("%q, want %q", msgs, want)
	}
	msgs, _ = evaluate(t, p, admission{object: podObject(map[string]any{"external-ip/addresses": "2001:db8:12b:f::80"}),
		params: map[string]any{"data": data}, namespace: "a"})
	if len(msgs) > 0 {
		t.Errorf("an IP of the last pool: %q", msgs)
	}
}
