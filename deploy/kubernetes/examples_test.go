package kubernetes

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// annotation is the plugin's default podAnnotation.
const annotation = "external-ip/addresses"

// workload is what the tests read of an example: its own annotations, its
// pod template and its replica count.
type workload struct {
	annotations map[string]string
	template    corev1.PodTemplateSpec
	replicas    int32
}

func workloadOf(t *testing.T, obj any) workload {
	t.Helper()
	var w workload
	var replicas *int32
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		w.annotations, w.template, replicas = o.Annotations, o.Spec.Template, o.Spec.Replicas
	case *appsv1.Deployment:
		w.annotations, w.template, replicas = o.Annotations, o.Spec.Template, o.Spec.Replicas
	default:
		t.Fatalf("%T: not a workload the examples show", obj)
	}
	w.replicas = 1 // the API's default
	if replicas != nil {
		w.replicas = *replicas
	}
	return w
}

// fits is, per example, the property docs/workloads.md says makes it fit
// one external IP. An example missing here fails: each must say why it fits.
var fits = map[string]func(obj any, w workload) error{
	"statefulset-of-one.yaml": func(obj any, w workload) error {
		ss, ok := obj.(*appsv1.StatefulSet)
		if !ok || w.replicas != 1 {
			return fmt.Errorf("want a StatefulSet of 1; got %T of %d", obj, w.replicas)
		}
		if ss.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
			return fmt.Errorf("updateStrategy OnDelete: the example rolls its pod itself")
		}
		return nil
	},
	"deployment-recreate.yaml": func(obj any, w workload) error {
		d, ok := obj.(*appsv1.Deployment)
		if !ok || w.replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			return fmt.Errorf("want a Deployment of 1 with strategy Recreate; got %T of %d", obj, w.replicas)
		}
		return nil
	},
	"deployment-one-node.yaml": func(obj any, w workload) error {
		if w.template.Spec.NodeSelector["kubernetes.io/hostname"] == "" && w.template.Spec.NodeName == "" {
			return fmt.Errorf("its %d replicas are not pinned to one node", w.replicas)
		}
		if w.replicas < 2 {
			return fmt.Errorf("%d replica: the example is of several sharing the IP", w.replicas)
		}
		return nil
	},
	"deployment-routed.yaml": func(obj any, w workload) error {
		spread := slices.ContainsFunc(w.template.Spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
			return c.TopologyKey == "kubernetes.io/hostname"
		})
		if !spread || w.replicas < 2 {
			return fmt.Errorf("want several replicas spread over nodes (route mode's case); got %d, spread %v", w.replicas, spread)
		}
		return nil
	},
}

// asks checks that the pod template, not the workload, carries the
// annotation (only the pod's annotations reach the plugin), with addresses
// from the documentation ranges.
func asks(w workload) error {
	if _, on := w.annotations[annotation]; on {
		return fmt.Errorf("%s is on the workload, where no pod sees it; put it in spec.template.metadata.annotations", annotation)
	}
	v, ok := w.template.Annotations[annotation]
	if !ok {
		return fmt.Errorf("the pod template has no %s annotation", annotation)
	}
	docs := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32")}
	for _, s := range strings.Split(v, ",") {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || !slices.ContainsFunc(docs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return fmt.Errorf("%s %q: %q is not an address of the documentation ranges", annotation, v, s)
		}
	}
	return nil
}

func TestEveryWorkloadExampleDecodesStrictlyAsksInItsPodTemplateAndFitsOneIP(t *testing.T) {
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil || len(files) != len(fits) {
		t.Fatalf("examples: %v %v; want one per case docs/workloads.md shows (%d)", files, err, len(fits))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(data), "\n---") {
				t.Fatalf("one document per file, so that each is decoded")
			}
			obj := decode(t, data)
			w := workloadOf(t, obj)
			fit, ok := fits[filepath.Base(f)]
			if !ok {
				t.Fatalf("no check of why this example fits one external IP; add it to fits")
			}
			if err := asks(w); err != nil {
				t.Error(err)
			}
			if err := fit(obj, w); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestTheExampleChecksCatchAnAnnotationOnTheWorkloadAndASurgingDeployment(t *testing.T) {
	if err := asks(workload{annotations: map[string]string{annotation: "192.0.2.10"}}); err == nil {
		t.Error("an annotation on the Deployment itself passed")
	}
	outside := workload{}
	outside.template.Annotations = map[string]string{annotation: "192.0.2.10,10.0.0.1"}
	if err := asks(outside); err == nil {
		t.Error("an address outside the documentation ranges passed")
	}
	one := int32(1)
	surging := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &one}} // the default strategy: RollingUpdate
	if err := fits["deployment-recreate.yaml"](surging, workloadOf(t, surging)); err == nil {
		t.Error("a Deployment with the default (surging) strategy passed as Recreate")
	}
}
