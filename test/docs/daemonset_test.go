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

// docs/kubernetes.md tells the operator of a node whose CNI dirs are
// elsewhere (k3s, GKE) to change only the hostPath of two volumes: that
// holds while the container mounts them where its --conf-dir and
// --bin-dir point, in every container that takes them.
func TestTheDocsWayToOtherCNIDirsChangesOnlyTheHostPaths(t *testing.T) {
	ds, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### Nodes whose CNI dirs are elsewhere")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal(`docs/kubernetes.md has no "### Nodes whose CNI dirs are elsewhere"`)
	}
	for _, c := range []struct{ volume, mount, flag string }{
		{"cni-conf", "/host/etc/cni/net.d", "--conf-dir"},
		{"cni-bin", "/host/opt/cni/bin", "--bin-dir"},
	} {
		mounted := regexp.MustCompile(`- name: ` + c.volume + `\s*\n\s*mountPath: ` + regexp.QuoteMeta(c.mount) + `\n`)
		if !mounted.Match(ds) {
			t.Errorf("daemonset.yaml does not mount the volume %s at %s, as the doc says", c.volume, c.mount)
		}
		flags := regexp.MustCompile(regexp.QuoteMeta(c.flag)+`=(\S+)`).FindAllSubmatch(ds, -1)
		for _, f := range flags {
			if string(f[1]) != c.mount {
				t.Errorf("daemonset.yaml passes %s=%s, not the mount %s: changing only the hostPath would not do", c.flag, f[1], c.mount)
			}
		}
		if len(flags) < 2 {
			t.Errorf("%d %s flags in daemonset.yaml, want the install's and the readiness probe's: the test reads the wrong file", len(flags), c.flag)
		}
		if !strings.Contains(section, "`"+c.volume+"`") || !strings.Contains(section, "`"+c.mount+"`") {
			t.Errorf("docs/kubernetes.md's section on other CNI dirs does not name the volume %s and its mount %s", c.volume, c.mount)
		}
	}
}
