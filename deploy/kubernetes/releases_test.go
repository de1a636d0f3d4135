package kubernetes

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apiserver/pkg/cel/environment"
)

// apiServerCEL is the CEL environment in which an API server of release r
// compiles an expression it is sent (a CRD's rule, a policy's): the
// libraries of its compatibility version, one release behind
// (environment.DefaultCompatibilityVersion), so that after a rollback the
// release before still runs what was stored. CEL's ip and cidr libraries
// came in 1.30, so an API server takes them from 1.31 on (Kubernetes' CEL
// docs: "Kubernetes versions 1.31+"); 1.30 refuses them in a new rule.
func apiServerCEL(r *version.Version) *environment.EnvSet {
	return environment.MustBaseEnvSet(version.MajorMinor(r.Major(), r.Minor()-1))
}

// The oldest release that serves ValidatingAdmissionPolicy v1, and the
// oldest whose API server takes the CRDs (their rules use the ip and cidr
// libraries).
var (
	firstPolicyRelease = version.MajorMinor(1, 30)
	crdsNeed           = version.MajorMinor(1, 31)
)

var needsRE = regexp.MustCompile(`(?m)^# Needs Kubernetes (1\.\d+) or later`)

// policyNeeds is the release a policy's header says it needs.
func policyNeeds(t *testing.T, file string) *version.Version {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := needsRE.FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s: its header says nowhere \"# Needs Kubernetes 1.NN or later\"", file)
	}
	return version.MustParseGeneric(string(m[1]))
}

// policyFile is the file that ships the policy of that name.
func policyFile(name string) string {
	return "policy-" + strings.TrimPrefix(name, "external-ip-") + ".yaml"
}

// policyEnv is release r's environment for a policy's expressions, with
// the variables the API server declares for them.
func policyEnv(r *version.Version) (*cel.Env, error) {
	return apiServerCEL(r).NewExpressionsEnv().Extend(
		cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType), cel.Variable("params", cel.DynType),
		cel.Variable("request", cel.DynType), cel.Variable("namespaceObject", cel.DynType),
		cel.Variable("variables", cel.MapType(cel.StringType, cel.DynType)))
}

// compilePolicy compiles every expression of p as an API server of
// release r would when the policy is applied; nil when all compile.
func compilePolicy(p *admissionregistrationv1.ValidatingAdmissionPolicy, r *version.Version) error {
	env, err := policyEnv(r)
	if err != nil {
		return err
	}
	var exprs []string
	for _, m := range p.Spec.MatchConditions {
		exprs = append(exprs, m.Expression)
	}
	for _, v := range p.Spec.Variables {
		exprs = append(exprs, v.Expression)
	}
	for _, v := range p.Spec.Validations {
		exprs = append(exprs, v.Expression, v.MessageExpression)
	}
	for _, e := range exprs {
		if _, iss := env.Compile(e); e != "" && iss.Err() != nil {
			return fmt.Errorf("%.60s...: %w", e, iss.Err())
		}
	}
	return nil
}

// Each manifest says the oldest release it needs (a policy in its
// header, the CRDs here), and it is that release exactly: its CEL
// compiles there, and, past the first release that has the API, not in
// the release before. A claim one release too new would tell the users
// of that release to leave out what would protect them.
func TestEachManifestNeedsTheReleaseItSaysAndNoLater(t *testing.T) {
	files, _ := filepath.Glob("policy-*.yaml")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "-binding.yaml") {
			continue
		}
		n++
		p, need := policy(t, f), policyNeeds(t, f)
		if policyFile(p.Name) != f {
			t.Errorf("%s ships the policy %s: name them alike", f, p.Name)
		}
		if err := compilePolicy(p, need); err != nil {
			t.Errorf("%s says it needs Kubernetes %s, whose API server refuses it: %v", f, need, err)
		}
		before := version.MajorMinor(need.Major(), need.Minor()-1)
		if need.GreaterThan(firstPolicyRelease) && compilePolicy(p, before) == nil {
			t.Errorf("%s says it needs Kubernetes %s, but %s takes it too: say %s", f, need, before, before)
		}
	}
	if n != 5 {
		t.Errorf("%d policies, want 5: the test reads the wrong files", n)
	}
	before := version.MajorMinor(crdsNeed.Major(), crdsNeed.Minor()-1)
	for _, f := range crdFiles {
		if errs := crdRuleErrors(t, f, crdsNeed); len(errs) > 0 {
			t.Errorf("%s: the CRDs need Kubernetes %s, whose API server refuses it: %v", f, crdsNeed, errs)
		}
		if len(crdRuleErrors(t, f, before)) == 0 {
			t.Errorf("%s: the CRDs are said to need Kubernetes %s, but %s takes them too", f, crdsNeed, before)
		}
	}
}

// The install docs say the release the manifests need, and whatever they
// say of an older release keeps the node-pods policy: without it the node
// process's account may patch any pod of the cluster, its image included.
func TestTheInstallDocsSayTheReleaseTheManifestsNeedAndNeverDropTheNodePodsPolicy(t *testing.T) {
	newest := crdsNeed
	files, _ := filepath.Glob("policy-*.yaml")
	for _, f := range files {
		if strings.HasSuffix(f, "-binding.yaml") {
			continue
		}
		if need := policyNeeds(t, f); need.GreaterThan(newest) {
			newest = need
		}
	}
	release := regexp.MustCompile(`\b1\.(\d\d)\b`)
	for _, doc := range []string{"../../docs/kubernetes.md", "../../docs/pools.md"} {
		section := installSection(t, doc)
		if want := fmt.Sprintf("Kubernetes %d.%d or later", newest.Major(), newest.Minor()); !strings.Contains(section, want) {
			t.Errorf("%s: its install section does not say %q, the release the manifests need", doc, want)
		}
		for _, s := range sentences(section) {
			for _, m := range release.FindAllStringSubmatch(s, -1) {
				if minor := version.MustParseGeneric("1." + m[1]).Minor(); minor < newest.Minor() && !strings.Contains(s, "external-ip-node-pods") {
					t.Errorf("%s: %q speaks of Kubernetes 1.%d without keeping external-ip-node-pods", doc, s, minor)
				}
			}
		}
	}
}

// installSection is a doc's "## Install" section, its code blocks left out.
func installSection(t *testing.T, doc string) string {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Install\n")
	if !ok {
		t.Fatalf("%s has no \"## Install\" section", doc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var prose []string
	for k, part := range strings.Split(section, "```") {
		if k%2 == 0 {
			prose = append(prose, part)
		}
	}
	return strings.Join(strings.Fields(strings.Join(prose, " ")), " ")
}

// sentences splits prose at the end of each sentence.
func sentences(prose string) []string {
	return regexp.MustCompile(`[.:;] `).Split(prose, -1)
}
