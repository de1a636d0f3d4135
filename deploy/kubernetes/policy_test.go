package kubernetes

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	"sigs.k8s.io/yaml"

	"github.com/external-ip/external-ip/pkg/claims"
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

// admission is one request as a policy sees it.
type admission struct {
	object, params, namespaceObject map[string]any
	namespace                       string
}

// evaluate runs a policy's match conditions, variables and validations in
// the oldest release's CEL environment (the API server's own libraries), as
// the API server does with untyped objects, and returns the messages of the
// validations that fail; matched is false when a match condition excludes
// the request.
func evaluate(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy, a admission) (msgs []string, matched bool) {
	t.Helper()
	env, err := environment.MustBaseEnvSet(oldestKubernetes).NewExpressionsEnv().Extend(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("params", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("namespaceObject", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]any{}
	act := map[string]any{"object": a.object, "oldObject": nil, "params": a.params, "namespaceObject": a.namespaceObject,
		"request": map[string]any{"namespace": a.namespace}, "variables": vars}
	run := func(what, expr string) any {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s %s: does not compile in Kubernetes %s: %v", p.Name, what, oldestKubernetes, iss.Err())
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
		{[]string{"::1-::2"}, ""},
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
	if len(policies) != 4 {
		t.Errorf("%d policies, want 4", len(policies))
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
			(b.Spec.ParamRef.Name != claims.PolicyParams || b.Spec.ParamRef.Namespace != daemonSetNamespace(t)) {
			t.Errorf("%s: reads ConfigMap %s/%s; the leader writes %s/%s", f, b.Spec.ParamRef.Namespace, b.Spec.ParamRef.Name, daemonSetNamespace(t), claims.PolicyParams)
		}
	}
	role := all["role.yaml"].(*rbacv1.Role)
	if !slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.ResourceNames, claims.LeaseName) }) ||
		!slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.ResourceNames, claims.PolicyParams) }) {
		t.Errorf("role.yaml names neither the Lease %s nor the ConfigMap %s", claims.LeaseName, claims.PolicyParams)
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
