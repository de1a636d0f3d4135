package kubernetes

import (
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/external-ip/external-ip/pkg/metrics"
	"github.com/external-ip/external-ip/pkg/report"
	"github.com/external-ip/external-ip/pkg/tally"
	"github.com/external-ip/external-ip/pkg/upkeep"
)

// prometheusRule is the part of the Prometheus Operator's PrometheusRule
// (monitoring.coreos.com/v1) that prometheusrule.yaml uses, decoded
// strictly: a key the CRD does not have fails here.
type prometheusRule struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Rules    []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// podMonitor is the part of the operator's PodMonitor that podmonitor.yaml
// uses.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector        metav1.LabelSelector `json:"selector"`
		PodTargetLabels []string             `json:"podTargetLabels,omitempty"`
		Endpoints       []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval,omitempty"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// servedNames are the metric names the node process serves, every one made
// to appear once.
func servedNames(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	m := metrics.New("v", "r", dir)
	ip, mac := netip.MustParseAddr("192.0.2.5"), net.HardwareAddr{2, 0, 0, 0, 0, 1}
	m.Held([]upkeep.HeldIP{{IP: ip, Uplink: "up0", Holders: 1}})
	m.Repaired(report.KindAddress)
	m.ConflictBegan(ip, mac)
	tally.Record(dir, "ADD", 0)
	m.ReadPools(func() []metrics.PoolAddresses { return []metrics.PoolAddresses{{Pool: "p", Used: 1, Free: 1}} })
	m.Refused("PoolExhausted")
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	return names
}

func TestTheAlertsCoverEveryFailureModeAndNameOnlyServedMetrics(t *testing.T) {
	pr, ok := manifests(t)["prometheusrule.yaml"].(*prometheusRule)
	if !ok {
		t.Fatal("prometheusrule.yaml is not a PrometheusRule")
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Metadata.Namespace != "external-ip" {
		t.Errorf("apiVersion %q, namespace %q; want monitoring.coreos.com/v1, external-ip", pr.APIVersion, pr.Metadata.Namespace)
	}
	served := servedNames(t)
	exprs := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s: wants a severity, a summary and a description", r.Alert)
			}
			for _, name := range regexp.MustCompile(`external_ip_[a-z_]+`).FindAllString(r.Expr, -1) {
				if !slices.Contains(served, name) {
					t.Errorf("alert %s uses %s, which the node process does not serve (it serves %v)", r.Alert, name, served)
				}
			}
		}
	}
	for alert, metric := range map[string]string{
		"ExternalIPConflict":         "external_ip_conflict",
		"ExternalIPCNIFailures":      "external_ip_cni_requests_total",
		"ExternalIPRepairsRecurring": "external_ip_repairs_total",
		"ExternalIPUpkeepDown":       `absent(`,
		"ExternalIPPoolNearlyFull":   `external_ip_pool_addresses{state="used"}`,
	} {
		if !strings.Contains(exprs[alert], metric) {
			t.Errorf("alert %s: expr %q; want one on %s", alert, exprs[alert], metric)
		}
	}
}

func TestTheScrapeTargetsAreWhereTheDaemonSetServes(t *testing.T) {
	all := manifests(t)
	ds := all["daemonset.yaml"].(*appsv1.DaemonSet)
	c := ds.Spec.Template.Spec.Containers[0]
	addr := flagValue(c.Command, "--metrics-address=")
	_, port, err := net.SplitHostPort(addr)
	if err != nil || !strings.Contains(addr, "$(NODE_IP)") {
		t.Fatalf("--metrics-address=%q; want the node's IP and a port", addr)
	}
	var env string
	for _, e := range c.Env {
		if e.Name == "NODE_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env != "status.hostIP" {
		t.Errorf("NODE_IP comes from %q; want status.hostIP", env)
	}
	if got := ds.Spec.Template.Annotations["prometheus.io/port"]; got != port || ds.Spec.Template.Annotations["prometheus.io/scrape"] != "true" {
		t.Errorf("scrape annotations %v; want port %s", ds.Spec.Template.Annotations, port)
	}
	pm := all["podmonitor.yaml"].(*podMonitor)
	var named string
	for _, p := range c.Ports {
		if p.Name == pm.Spec.Endpoints[0].Port && p.ContainerPort > 0 {
			named = p.Name
			if strconv.Itoa(int(p.ContainerPort)) != port {
				t.Errorf("port %s is %d; --metrics-address serves %s", p.Name, p.ContainerPort, port)
			}
		}
	}
	if named == "" || pm.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != ds.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Errorf("the PodMonitor scrapes port %q of pods %v; the DaemonSet names ports %v, labels %v",
			pm.Spec.Endpoints[0].Port, pm.Spec.Selector.MatchLabels, c.Ports, ds.Spec.Template.Labels)
	}
}

// scrapeLabels are the labels of the up series of one installer pod, as
// each way of discovering it gives them: the PodMonitor (the operator's
// job namespace/name, and the podTargetLabels), and the DaemonSet's
// prometheus.io/* annotations with the usual kubernetes-pods job (the
// pod's labels mapped, its namespace and name).
func scrapeLabels(t *testing.T) map[string]map[string]string {
	t.Helper()
	all := manifests(t)
	ds, pm := all["daemonset.yaml"].(*appsv1.DaemonSet), all["podmonitor.yaml"].(*podMonitor)
	sanitize := regexp.MustCompile(`[^a-zA-Z0-9_]`)
	base := func(job string) map[string]string {
		return map[string]string{"job": job, "instance": "192.0.2.1:9477", "namespace": ds.Namespace, "pod": "external-ip-x1"}
	}
	operator := base(pm.Metadata.Namespace + "/" + pm.Metadata.Name)
	operator["container"], operator["endpoint"] = ds.Spec.Template.Spec.Containers[0].Name, pm.Spec.Endpoints[0].Port
	for _, l := range pm.Spec.PodTargetLabels {
		operator[sanitize.ReplaceAllString(l, "_")] = ds.Spec.Template.Labels[l]
	}
	annotations := base("kubernetes-pods")
	for k, v := range ds.Spec.Template.Labels {
		annotations[sanitize.ReplaceAllString(k, "_")] = v
	}
	return map[string]map[string]string{"PodMonitor": operator, "prometheus.io annotations": annotations}
}

func series(labels map[string]string) string {
	var parts []string
	for k, v := range labels {
		parts = append(parts, k+"="+strconv.Quote(v))
	}
	slices.Sort(parts)
	return "up{" + strings.Join(parts, ",") + "}"
}

// ExternalIPUpkeepDown, evaluated by promtool (Debian's prometheus
// package, which make deps installs): quiet while the pods are scraped and
// up, firing when one is down and when none is scraped, whichever way
// Prometheus discovers them.
func TestTheUpkeepDownAlertFollowsThePodsWhicheverWayTheyAreScraped(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Geteuid() == 0 {
			t.Fatal("no promtool: make deps installs Debian's prometheus")
		}
		t.Skip("no promtool (make deps, as root, installs it)")
	}
	pr := manifests(t)["prometheusrule.yaml"].(*prometheusRule)
	var down rule
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "ExternalIPUpkeepDown" {
				down = r
			}
		}
	}
	type alert struct {
		Labels      map[string]string `json:"exp_labels"`
		Annotations map[string]string `json:"exp_annotations"`
	}
	firing := func(labels map[string]string) []alert {
		l := map[string]string{}
		maps.Copy(l, labels)
		maps.Copy(l, down.Labels)
		return []alert{{l, down.Annotations}}
	}
	other := map[string]string{"job": "kubernetes-pods", "namespace": "kube-system", "pod": "coredns-1", "app_kubernetes_io_name": "coredns"}
	var tests []any
	add := func(what string, in map[string]string, value string, want []alert) {
		tests = append(tests, map[string]any{"name": what, "interval": "1m",
			"input_series":    []any{map[string]any{"series": series(in), "values": value + "x15"}, map[string]any{"series": series(other), "values": "1x15"}},
			"alert_rule_test": []any{map[string]any{"eval_time": "10m", "alertname": down.Alert, "exp_alerts": want}}})
	}
	for how, labels := range scrapeLabels(t) {
		add(how+": up", labels, "1", []alert{})
		add(how+": down", labels, "0", firing(labels))
	}
	add("nothing of ours scraped", other, "1", firing(nil))
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644))
	spec, err := yaml.Marshal(map[string]any{"rule_files": []string{"rules.yaml"}, "evaluation_interval": "1m", "tests": tests})
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "test.yaml"), spec, 0o644))
	cmd := exec.Command(promtool, "test", "rules", "test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s\ntests:\n%s", err, out, spec)
	}
}
