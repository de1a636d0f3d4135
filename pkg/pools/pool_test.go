package pools

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
)

func pool(name string, age int, spec v1alpha1.ExternalIPPoolSpec) *v1alpha1.ExternalIPPool {
	return &v1alpha1.ExternalIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9+int64(age), 0))},
		Spec:       spec,
	}
}

func ranges(r ...string) []v1alpha1.Range {
	out := make([]v1alpha1.Range, len(r))
	for i, s := range r {
		out[i] = v1alpha1.Range(s)
	}
	return out
}

func TestOfOverlappingPoolsTheOldestGivesAndTheOthersSayWhyNot(t *testing.T) {
	set := Resolve([]*v1alpha1.ExternalIPPool{
		pool("c", 3, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.32/28")}),
		pool("b", 2, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.10-192.0.2.40")}),
		pool("a", 1, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/28")}),
		pool("bad", 0, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/24", "x")}),
	})
	for name, want := range map[string]string{"a": ReasonReady, "b": ReasonOverlaps, "c": ReasonReady, "bad": ReasonInvalid} {
		if got := set.Get(name).Reason; got != want {
			t.Errorf("pool %s: %s (%s), want %s", name, got, set.Get(name).Refused, want)
		}
	}
	if msg := set.Get("b").Refused; msg != "spec.ranges: 192.0.2.10-192.0.2.40 overlaps 192.0.2.0/28 of pool a, which is older: change or delete one of them" {
		t.Errorf("b's message: %q", msg)
	}
	if !strings.Contains(set.Get("bad").Refused, `spec.ranges[1]: "x"`) {
		t.Errorf("bad's message: %q", set.Get("bad").Refused)
	}
	if p := set.Covering(netip.MustParseAddr("192.0.2.12")); p == nil || p.Name() != "a" {
		t.Errorf("192.0.2.12 lies in %v, want pool a", p)
	}
	if p := set.Covering(netip.MustParseAddr("192.0.2.20")); p == nil || p.Name() != "b" {
		t.Errorf("192.0.2.20 lies in %v, want pool b (which gives nothing, so that the refusal names it)", p)
	}
	if set.Covering(netip.MustParseAddr("203.0.113.1")) != nil {
		t.Error("an IP in no pool is covered")
	}
}

func TestAPoolAdmitsTheNamespacesItNamesOrSelectsAndNoneByDefault(t *testing.T) {
	set := Resolve([]*v1alpha1.ExternalIPPool{
		pool("none", 0, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/28")}),
		pool("all", 0, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.16/28"), NamespaceSelector: &metav1.LabelSelector{}}),
		pool("some", 0, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.32/28"), Namespaces: []v1alpha1.NamespaceName{"team-a"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}},
			NodeSelector:      &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "edge", Operator: metav1.LabelSelectorOpExists}}}}),
	})
	for _, tc := range []struct {
		pool, ns string
		labels   map[string]string
		want     bool
	}{
		{"none", "team-a", nil, false},
		{"all", "anything", nil, true},
		{"some", "team-a", nil, true},
		{"some", "team-b", map[string]string{"tier": "web"}, true},
		{"some", "team-b", map[string]string{"tier": "db"}, false},
	} {
		if got := set.Get(tc.pool).AdmitsNamespace(tc.ns, tc.labels); got != tc.want {
			t.Errorf("pool %s admits namespace %s %v: %v, want %v", tc.pool, tc.ns, tc.labels, got, tc.want)
		}
	}
	if !set.Get("none").AdmitsNode(nil) || set.Get("some").AdmitsNode(map[string]string{"x": "y"}) || !set.Get("some").AdmitsNode(map[string]string{"edge": ""}) {
		t.Error("nodeSelector: unset admits every node; set, only the nodes it matches")
	}
}

func TestPublishedBoundsAreTheKeysOfEachRangesEnds(t *testing.T) {
	set := Resolve([]*v1alpha1.ExternalIPPool{pool("p", 0, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/30", "2001:db8::1-2001:db8::a")})})
	want := "4192.000.002.000-4192.000.002.003,62001:0db8:0000:0000:0000:0000:0000:0001-62001:0db8:0000:0000:0000:0000:0000:000a"
	if got := set.Published()["p"]; got != want {
		t.Errorf("published %q, want %q", got, want)
	}
}

// A pool covering addresses no external IP may be (the plugin refuses a
// node-local pool of them) gives none, and says which range and why.
func TestAPoolCoveringUnusableAddressesGivesNone(t *testing.T) {
	set := Resolve([]*v1alpha1.ExternalIPPool{
		pool("lo", 0, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/28", "126.255.255.250-127.0.0.5")}),
		pool("mc", 0, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("ff02::/120")}),
		pool("ok", 0, v1alpha1.ExternalIPPoolSpec{Ranges: ranges("198.51.100.0/28")}),
	})
	for name, want := range map[string]string{
		"lo": `spec.ranges[1]: "126.255.255.250-127.0.0.5" holds loopback addresses`,
		"mc": `spec.ranges[0]: "ff02::/120" holds multicast addresses`,
		"ok": "",
	} {
		p := set.Get(name)
		if p.Refused != want || p.Ready() != (want == "") {
			t.Errorf("pool %s: ready %v, %q; want %q", name, p.Ready(), p.Refused, want)
		}
	}
	if p := set.Covering(netip.MustParseAddr("192.0.2.1")); p == nil || p.Name() != "lo" {
		t.Errorf("192.0.2.1 lies in %v, want pool lo (which gives nothing, so that the refusal names it)", p)
	}
}
