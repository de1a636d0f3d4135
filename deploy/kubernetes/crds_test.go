package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	schemacel "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdFiles are the CRDs that `go generate ./pkg/apis/...` writes here.
var crdFiles = []string{"external-ip.io_externalipclaims.yaml", "external-ip.io_externalippools.yaml"}

func goBin() string { return filepath.Join(runtime.GOROOT(), "bin", "go") }

func TestTheCRDsAreThoseTheGoTypesGenerate(t *testing.T) {
	cmd := exec.Command(goBin(), "tool", "controller-gen", "crd:maxDescLen=400",
		"paths=./pkg/apis/externalip/v1alpha1", "output:crd:stdout")
	cmd.Dir = "../.."
	want, err := cmd.Output()
	if err != nil {
		t.Fatalf("controller-gen: %v", err)
	}
	var have []byte
	for _, f := range crdFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		have = append(have, data...)
	}
	if !bytes.Equal(want, have) {
		t.Errorf("the CRDs in deploy/kubernetes are not those the types generate: run go generate ./pkg/apis/...")
	}
	cmd = exec.Command(goBin(), "tool", "controller-gen", "object", "paths=./pkg/apis/externalip/v1alpha1", "output:object:stdout")
	cmd.Dir = "../.."
	want, err = cmd.Output()
	if err != nil {
		t.Fatalf("controller-gen object: %v", err)
	}
	have, _ = os.ReadFile("../../pkg/apis/externalip/v1alpha1/zz_generated.deepcopy.go")
	if !bytes.Equal(want, have) {
		t.Errorf("zz_generated.deepcopy.go is not what the types generate: run go generate ./pkg/apis/...")
	}
}

// crd reads a shipped CRD into the API server's internal type.
func crd(t *testing.T, file string) *apiextensions.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var v1 apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &v1); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &internal, nil); err != nil {
		t.Fatal(err)
	}
	// What the API server sets once it stores the first object.
	internal.Status.StoredVersions = []string{internal.Spec.Versions[0].Name}
	return &internal
}

func structural(t *testing.T, c *apiextensions.CustomResourceDefinition) *structuralschema.Structural {
	t.Helper()
	schema := c.Spec.Validation
	if schema == nil {
		schema = c.Spec.Versions[0].Schema
	}
	s, err := structuralschema.NewStructural(schema.OpenAPIV3Schema)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTheAPIServerWouldAcceptTheCRDsFromTheReleaseTheyNeedOn(t *testing.T) {
	for _, f := range crdFiles {
		if errs := validation.ValidateCustomResourceDefinition(context.Background(), crd(t, f)); len(errs) > 0 {
			t.Errorf("%s: the API server refuses it: %v", f, errs.ToAggregate())
		}
		for _, err := range crdRuleErrors(t, f, crdsNeed) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// crdRuleErrors compiles every rule of a CRD as an API server of release r
// would when the CRD is applied, and says which do not compile.
func crdRuleErrors(t *testing.T, f string, r *version.Version) []error {
	t.Helper()
	var errs []error
	envs := apiServerCEL(r)
	var walk func(s *structuralschema.Structural, root bool, path string)
	walk = func(s *structuralschema.Structural, root bool, path string) {
		if len(s.XValidations) > 0 {
			res, err := schemacel.Compile(s, model.SchemaDeclType(s, root), celconfig.PerCallLimit, envs, schemacel.NewExpressionsEnvLoader())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
			}
			for i, r := range res {
				if r.Error != nil || r.MessageExpressionError != nil {
					errs = append(errs, fmt.Errorf("%s rule %d: %v %v", path, i, r.Error, r.MessageExpressionError))
				}
			}
		}
		for name, p := range s.Properties {
			walk(&p, false, path+"."+name)
		}
		if s.Items != nil {
			walk(s.Items, false, path+"[]")
		}
	}
	walk(structural(t, crd(t, f)), true, "")
	return errs
}

// validate runs the CRD's CEL rules on obj (and oldObj, for an update) as
// the API server does, and returns the messages of what they refuse.
func validate(t *testing.T, file string, obj, oldObj map[string]any) []string {
	t.Helper()
	s := structural(t, crd(t, file))
	v := schemacel.NewValidator(s, true, celconfig.PerCallLimit)
	var old any
	if oldObj != nil {
		old = oldObj
	}
	errs, _ := v.Validate(context.Background(), field.NewPath(""), s, obj, old, celconfig.RuntimeCELCostBudget)
	var out []string
	for _, e := range errs {
		out = append(out, e.Field+": "+e.Detail)
	}
	return out
}

func poolObject(ranges ...string) map[string]any {
	rs := make([]any, len(ranges))
	for i, r := range ranges {
		rs[i] = r
	}
	return map[string]any{"apiVersion": "external-ip.io/v1alpha1", "kind": "ExternalIPPool",
		"metadata": map[string]any{"name": "p"}, "spec": map[string]any{"ranges": rs}}
}

func TestThePoolSchemaRefusesARangeWrittenWrongAndSaysHowToWriteIt(t *testing.T) {
	for _, tc := range []struct {
		rng  string
		want string // "" accepted
	}{
		{"192.0.2.0/28", ""},
		{"2001:db8:1::/120", ""},
		{"192.0.2.10-192.0.2.20", ""},
		{"192.0.2.10-192.0.2.10", ""},
		{"2001:db8::9-2001:db8::10", ""},
		{"2001:db8::ffff-2001:db8::1:0", ""},
		{"::1-::2", ""},
		{"nope", "must be a CIDR such as 192.0.2.0/28 or first-last"},
		{"192.0.2.1/28", "a CIDR must have no host bits set and be written canonical"},
		{"2001:DB8::/32", "a CIDR must have no host bits set and be written canonical"},
		{"2001:db8::0010-2001:db8::20", "first and last must be written canonical"},
		{"192.0.2.1-2001:db8::1", "first and last must be of one family"},
		{"::ffff:192.0.2.1-::ffff:192.0.2.9", "must be a CIDR such as"},
		// Reversed: refused by the admission policy and the node processes.
		{"192.0.2.20-192.0.2.3", ""},
	} {
		got := validate(t, crdFiles[1], poolObject(tc.rng), nil)
		if tc.want == "" && len(got) > 0 {
			t.Errorf("range %q refused: %v", tc.rng, got)
		}
		if tc.want != "" && !slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, tc.want) }) {
			t.Errorf("range %q: %v, want a refusal saying %q", tc.rng, got, tc.want)
		}
	}
}

func claimObject(name, address string, owner map[string]any) map[string]any {
	return map[string]any{"apiVersion": "external-ip.io/v1alpha1", "kind": "ExternalIPClaim",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"address": address, "pool": "p", "owner": owner}}
}

func TestAClaimIsNamedAfterItsAddressAndNeverChangesOwner(t *testing.T) {
	ns := map[string]any{"namespace": "a"}
	for _, tc := range []struct {
		name, address, want string
	}{
		{"192.0.2.10", "192.0.2.10", ""},
		{"2001-db8--1", "2001:db8::1", ""},
		{"2001-db8--0", "2001:db8::", ""},
		{"192.0.2.11", "192.0.2.10", "metadata.name must be the address"},
		{"2001-db8--1", "2001:db8:0::1", "must be an IP address written canonical"},
	} {
		got := validate(t, crdFiles[0], claimObject(tc.name, tc.address, ns), nil)
		if (tc.want == "") != (len(got) == 0) || (tc.want != "" && !strings.Contains(strings.Join(got, "\n"), tc.want)) {
			t.Errorf("claim %s for %s: %v, want %q", tc.name, tc.address, got, tc.want)
		}
	}
	old := claimObject("192.0.2.10", "192.0.2.10", ns)
	got := validate(t, crdFiles[0], claimObject("192.0.2.10", "192.0.2.10", map[string]any{"namespace": "b"}), old)
	if !strings.Contains(strings.Join(got, "\n"), "address, pool and owner are immutable") {
		t.Errorf("an update that changes the owner: %v, want it refused", got)
	}
	both := map[string]any{"namespace": "a", "pod": map[string]any{"name": "x", "uid": "u"}, "statefulSet": map[string]any{"name": "s", "uid": "u", "ordinal": int64(0)}}
	if got := validate(t, crdFiles[0], claimObject("192.0.2.10", "192.0.2.10", both), nil); !strings.Contains(strings.Join(got, "\n"), "one of pod and statefulSet") {
		t.Errorf("an owner that is a pod and a StatefulSet: %v", got)
	}
}

// The standby watch's tie-break reads spec.activeNode, and a takeover
// rewrites it: the API server must keep it (a field the schema lacks is
// pruned on write, silently) and let it change while the owner cannot.
func TestAClaimKeepsItsActiveNodeAndATakeoverMayChangeIt(t *testing.T) {
	s := structural(t, crd(t, crdFiles[0]))
	withActive := func(node string) map[string]any {
		c := claimObject("192.0.2.10", "192.0.2.10", map[string]any{"namespace": "a"})
		c["spec"].(map[string]any)["activeNode"] = node
		return c
	}
	obj := withActive("node-1")
	pruned := pruning.PruneWithOptions(obj, s, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(pruned) > 0 || obj["spec"].(map[string]any)["activeNode"] != "node-1" {
		t.Errorf("the API server would prune %v of a claim naming its active node, leaving %v", pruned, obj["spec"])
	}
	if got := validate(t, crdFiles[0], withActive("node-2"), withActive("node-1")); len(got) > 0 {
		t.Errorf("a takeover that names another active node is refused: %v", got)
	}
}
