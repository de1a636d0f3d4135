package kubernetes

import (
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
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
		"ExternalIPUpkeepDown":       `up{job=~".*external-ip.*"}`,
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
