package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
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
}

func TestThePluginLinksNoHTTPStackNorLibcni(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages: not the plugin's dependencies", len(deps))
	}
	for _, d := range deps {
		for _, h := range heavyDeps {
			if d == h || strings.HasPrefix(d, h+"/") {
				t.Errorf("the plugin links %s", d)
			}
		}
	}
}
