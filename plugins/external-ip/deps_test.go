package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// heavyDeps are packages the plugin must not link: every CNI call starts the
// binary, and these cost megabytes and package inits at each start (libcni
// pulls in net/http, TLS and OpenTelemetry). The installer shares the binary,
// so a convenient import in pkg/install brings them back unnoticed.
var heavyDeps = []string{
	"github.com/containernetworking/cni/libcni",
	"net/http",
	"crypto/tls",
	"go.opentelemetry.io/otel",
	// The node process's metrics (build tag metrics) stay out of the plugin.
	"github.com/prometheus",
	// So does its Kubernetes client (build tag kubernetes): client-go's
	// package inits alone cost each start milliseconds.
	"k8s.io/client-go",
	"k8s.io/apimachinery",
	"k8s.io/api",
	"github.com/external-ip/external-ip/pkg/claims",
}

// deps are the packages a build with tags links.
func deps(t *testing.T, tags string) []string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-tags", tags, "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages: not the plugin's dependencies", len(deps))
	}
	return deps
}

// The node build has what the plugin must not: else the check above
// would pass for a tag that no longer selects anything.
func TestTheNodeBuildLinksTheKubernetesClientAndMetrics(t *testing.T) {
	d := deps(t, "metrics,kubernetes")
	for _, want := range []string{"k8s.io/client-go/tools/cache", "github.com/external-ip/external-ip/pkg/claims", "github.com/prometheus/client_golang/prometheus"} {
		if !slices.Contains(d, want) {
			t.Errorf("the node build (tags metrics,kubernetes) does not link %s", want)
		}
	}
}

func TestThePluginLinksNoHTTPStackNorLibcni(t *testing.T) {
	deps := deps(t, "")
	for _, d := range deps {
		for _, h := range heavyDeps {
			if d == h || strings.HasPrefix(d, h+"/") {
				t.Errorf("the plugin links %s", d)
			}
		}
	}
}
