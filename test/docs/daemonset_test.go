package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// hostPathRE finds a hostPath volume's path in a manifest.
var hostPathRE = regexp.MustCompile(`hostPath:\s*\n\s*path:\s*(\S+)`)

// docs/kubernetes.md lists what the DaemonSet mounts from the host, for an
// operator judging what it may touch: every hostPath of the manifest.
func TestTheKubernetesDocNamesEveryHostPathTheDaemonSetMounts(t *testing.T) {
	ds, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, bullet, ok := strings.Cut(string(doc), "- The DaemonSet:")
	bullet, _, _ = strings.Cut(bullet, "\n\n")
	paths := hostPathRE.FindAllStringSubmatch(string(ds), -1)
	if !ok || len(paths) < 4 {
		t.Fatalf("found the doc's DaemonSet bullet: %v; %d hostPaths in daemonset.yaml: the test reads the wrong place", ok, len(paths))
	}
	for _, p := range paths {
		if !strings.Contains(bullet, "`"+p[1]+"`") {
			t.Errorf("docs/kubernetes.md's DaemonSet bullet does not name the hostPath %s that daemonset.yaml mounts", p[1])
		}
	}
}
