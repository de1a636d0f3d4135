package kubernetes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/external-ip/external-ip/pkg/install"
	"github.com/external-ip/external-ip/pkg/store"
)

// decode reads one manifest into the API type of its kind, refusing any
// field the type does not have: a misspelled key fails here, not on a node.
func decode(t *testing.T, data []byte) any {
	t.Helper()
	var meta struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &meta); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	objs := map[string]any{"Namespace": &corev1.Namespace{}, "ConfigMap": &corev1.ConfigMap{}, "DaemonSet": &appsv1.DaemonSet{},
		"StatefulSet": &appsv1.StatefulSet{}, "Deployment": &appsv1.Deployment{},
		"PrometheusRule": &prometheusRule{}, "PodMonitor": &podMonitor{},
		"CustomResourceDefinition": &apiextensionsv1.CustomResourceDefinition{},
		"ServiceAccount":           &corev1.ServiceAccount{}, "ClusterRole": &rbacv1.ClusterRole{}, "ClusterRoleBinding": &rbacv1.ClusterRoleBinding{},
		"Role": &rbacv1.Role{}, "RoleBinding": &rbacv1.RoleBinding{},
		"ValidatingAdmissionPolicy":        &admissionregistrationv1.ValidatingAdmissionPolicy{},
		"ValidatingAdmissionPolicyBinding": &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}}
	obj, ok := objs[meta.Kind]
	if !ok {
		t.Fatalf("kind %q: not one this test knows; add it", meta.Kind)
	}
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", meta.Kind, err)
	}
	return obj
}

// manifests decodes every YAML file here, one document each.
func manifests(t *testing.T) map[string]any {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("manifests: %v %v; want namespace, configmap and daemonset", files, err)
	}
	out := map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "\n---") {
			t.Fatalf("%s: one document per file, so that each is decoded", f)
		}
		t.Run(f, func(t *testing.T) { out[f] = decode(t, data) })
	}
	return out
}

func TestEveryManifestDecodesStrictly(t *testing.T) {
	manifests(t)
}

func TestStrictDecodingRefusesAMisspelledField(t *testing.T) {
	data, err := os.ReadFile("daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), "hostNetwork:", "hostNetwrk:", 1)
	if err := yaml.UnmarshalStrict([]byte(bad), &appsv1.DaemonSet{}); err == nil || !strings.Contains(err.Error(), "hostNetwrk") {
		t.Errorf("a misspelled field decoded: %v", err)
	}
}

func daemonSet(t *testing.T) *corev1.PodSpec {
	t.Helper()
	ds, ok := manifests(t)["daemonset.yaml"].(*appsv1.DaemonSet)
	if !ok {
		t.Fatal("daemonset.yaml is not a DaemonSet")
	}
	if ds.Namespace != "external-ip" {
		t.Errorf("DaemonSet namespace %q, want external-ip (namespace.yaml)", ds.Namespace)
	}
	return &ds.Spec.Template.Spec
}

func TestTheDaemonSetRunsOnEveryNodeInTheHostNetworkWithOnlyTheCapabilitiesItNeeds(t *testing.T) {
	pod := daemonSet(t)
	if !pod.HostNetwork || pod.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork %v, priorityClassName %q; want true, system-node-critical", pod.HostNetwork, pod.PriorityClassName)
	}
	if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v; want one that tolerates every taint", pod.Tolerations)
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN", "NET_RAW"}) {
		t.Errorf("capabilities %+v; want ALL dropped, NET_ADMIN and NET_RAW added", sc)
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("the installer runs privileged")
	}
	paths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			paths[v.HostPath.Path] = v.Name
		}
	}
	for _, p := range []string{"/opt/cni/bin", "/etc/cni/net.d", "/run/cni/external-ip", store.NodeLockDir, podNetns} {
		if paths[p] == "" {
			t.Errorf("no hostPath volume for %s", p)
		}
	}
	if len(paths) != 5 {
		t.Errorf("hostPath volumes %v; want only the bin, conf and state dirs, the node lock's and the pods' namespaces'", paths)
	}
	// The standby watch judges a pod's namespace by the path the plugin
	// recorded: the same path inside, and nothing written there.
	for _, m := range c.VolumeMounts {
		if m.Name == paths[podNetns] && (m.MountPath != podNetns || !m.ReadOnly || m.MountPropagation != nil) {
			t.Errorf("the pods' namespaces are mounted at %s (read-only %v, propagation %v), want %s read-only without propagation (which a node whose / is private refuses)", m.MountPath, m.ReadOnly, m.MountPropagation, podNetns)
		}
	}
	// The node process takes the plugin's node lock: the same path inside.
	for _, m := range c.VolumeMounts {
		if m.Name == paths[store.NodeLockDir] && m.MountPath != store.NodeLockDir {
			t.Errorf("the node lock's directory is mounted at %s, want %s", m.MountPath, store.NodeLockDir)
		}
	}
}

// podNetns is where containerd and CRI-O keep the pods' namespaces.
const podNetns = "/var/run/netns"

func TestTheDaemonSetWatchesProbesReadinessAndNeverUninstalls(t *testing.T) {
	c := daemonSet(t).Containers[0]
	run := strings.Join(c.Command, " ")
	if !strings.Contains(run, "/external-ip-node install --watch") || flagValue(c.Command, "--plugin-binary=") != "/external-ip" {
		t.Errorf("command %q; want external-ip-node install --watch, installing the lean /external-ip", run)
	}
	// The probe runs the binary the command installs: it compares itself.
	if probe := c.ReadinessProbe; probe == nil || probe.Exec == nil || probe.Exec.Command[0] != "/external-ip" {
		t.Errorf("readiness probe %+v; want /external-ip install --check", probe)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.Exec == nil || !strings.Contains(strings.Join(c.ReadinessProbe.Exec.Command, " "), "install --check") {
		t.Errorf("readiness probe %+v; want external-ip install --check", c.ReadinessProbe)
	}
	// The probe must check what the container installs.
	for _, flag := range []string{"--plugin-config=", "--bin-dir=", "--conf-dir="} {
		if got, want := flagValue(c.ReadinessProbe.Exec.Command, flag), flagValue(c.Command, flag); got != want || want == "" {
			t.Errorf("probe %s%q, command %s%q; want the same", flag, got, flag, want)
		}
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		t.Fatal("no preStop hook")
	}
	if hook := strings.Join(c.Lifecycle.PreStop.Exec.Command, " "); strings.Contains(hook, "uninstall") {
		t.Errorf("preStop %q uninstalls: leaving the pod must not", hook)
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = true
	}
	for _, flag := range []string{"--bin-dir=", "--conf-dir=", "--data-dir="} {
		if !mounts[flagValue(c.Command, flag)] {
			t.Errorf("%s%s is not a mounted volume", flag, flagValue(c.Command, flag))
		}
	}
}

func flagValue(args []string, prefix string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, prefix); ok {
			return v
		}
	}
	return ""
}

func TestTheConfigMapEntryIsOneThePluginAcceptsAndRefusesRequestsUntilRangesAreSet(t *testing.T) {
	cm, ok := manifests(t)["configmap.yaml"].(*corev1.ConfigMap)
	if !ok {
		t.Fatal("configmap.yaml is not a ConfigMap")
	}
	if _, err := install.ParseEntry([]byte(cm.Data["plugin.json"])); err != nil {
		t.Errorf("plugin.json: %v", err)
	}
	if !strings.Contains(cm.Data["plugin.json"], `"allowedRanges": []`) {
		t.Errorf("plugin.json ships allowed ranges; it must ship none for the admin to fill in:\n%s", cm.Data["plugin.json"])
	}
	pod := daemonSet(t)
	var name string
	for _, v := range pod.Volumes {
		if v.ConfigMap != nil {
			name = v.ConfigMap.Name
		}
	}
	if name != cm.Name {
		t.Errorf("the DaemonSet mounts ConfigMap %q, the manifest is %q", name, cm.Name)
	}
}

func TestTheDaemonSetRunsTheImageThatMakeImageBuilds(t *testing.T) {
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, line := range strings.Split(string(mk), "\n") {
		if v, ok := strings.CutPrefix(line, "IMAGE"); ok && strings.Contains(v, "?=") {
			want = strings.TrimSpace(strings.SplitN(v, "?=", 2)[1])
		}
	}
	if got := daemonSet(t).Containers[0].Image; got != want || want == "" {
		t.Errorf("the DaemonSet runs %q, make image builds %q", got, want)
	}
}
