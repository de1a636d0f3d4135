package claims

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/external-ip/external-ip/pkg/apis/externalip/v1alpha1"
	"github.com/external-ip/external-ip/pkg/claims/claimstest"
)

// A node process that stops between its answer and the pod's annotation
// (a rollout) loses the write; the next one writes it from the claims.
func TestAPodWhoseAnnotationWasLostIsAnnotatedAgainByTheNextNodeProcess(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("dual", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29", "2001:db8::/125"), NamespaceSelector: everyNamespace()}))
	first := startNode(t, api, "n1")
	resp := first.claimFor(t, p, "s1", "dual")
	if len(resp.Addresses) != 2 {
		t.Fatalf("claim: %+v", resp)
	}
	annotated := func(want string) func() bool {
		return func() bool {
			got, _ := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
			return got.Annotations[v1alpha1.AnnotationAssigned] == want && got.Labels[v1alpha1.LabelHolder] == "true"
		}
	}
	waitFor(t, "the pod annotated", annotated(addrsOf(resp)))
	first.stop()
	// The write lost: the pod as the API server has it without it.
	setAnnotation(t, api, "")
	startNode(t, api, "n1", fast, func(c *Config) { c.DataDir = first.dir })
	waitFor(t, "the pod annotated again", annotated(addrsOf(resp)))
}

// An annotation that names other IPs than the pod's claims (the last of
// two attachments' answers, or a hand edit) is written again, once two
// passes agree.
func TestAnAnnotationNamingOtherIPsIsWrittenAgainAndAnotherPodOfTheNameIsLeftAlone(t *testing.T) {
	p := pod("a", "web", "n1")
	api := claimstest.New(namespace("a", nil), node("n1", nil), p,
		pool("a", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("192.0.2.0/29"), NamespaceSelector: everyNamespace()}),
		pool("b", v1alpha1.ExternalIPPoolSpec{Ranges: ranges("198.51.100.0/29"), NamespaceSelector: everyNamespace()}))
	n := startNode(t, api, "n1", fast)
	resp := n.claimFor(t, p, "s1", "a")
	other := n.claimFor(t, p, "s2", "b")         // a second attachment of the pod, of another pool
	want := addrsOf(resp) + "," + addrsOf(other) // 192.0.2.x before 198.51.100.x
	waitFor(t, "the pod annotated with both attachments' IPs", func() bool { return annotationOf(t, api) == want })
	setAnnotation(t, api, "192.0.2.200")
	waitFor(t, "the wrong annotation written again", func() bool { return annotationOf(t, api) == want })

	// Another pod of the same name (a new UID) holds none of them.
	got, _ := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
	got.UID, got.Annotations = "uid-new", nil
	if _, err := api.Kube.CoreV1().Pods("a").Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the cache sees the new pod", func() bool {
		q, err := n.local.Core().V1().Pods().Lister().Pods("a").Get("web")
		return err == nil && q.UID == "uid-new"
	})
	n.notes.repair()
	n.notes.repair()
	if a := annotationOf(t, api); a != "" {
		t.Errorf("the new pod of the name was annotated %q with the old one's IPs", a)
	}
}

func annotationOf(t *testing.T, api *claimstest.API) string {
	t.Helper()
	got, err := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Annotations[v1alpha1.AnnotationAssigned]
}

// setAnnotation sets pod a/web's annotation, "" to remove it.
func setAnnotation(t *testing.T, api *claimstest.API, v string) {
	t.Helper()
	got, err := api.Kube.CoreV1().Pods("a").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(got.Annotations, v1alpha1.AnnotationAssigned)
	if v != "" {
		got.Annotations[v1alpha1.AnnotationAssigned] = v
	}
	if _, err := api.Kube.CoreV1().Pods("a").Update(context.Background(), got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
