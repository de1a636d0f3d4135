package install

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/pkg/config"
)

// A list of a version the plugin does not speak is refused, in one line
// naming the file and the version, with nothing changed: chained, every
// ADD and DEL of the node would fail as incompatible.
func TestInstallRefusesAPrimaryOfAVersionThePluginDoesNotSpeak(t *testing.T) {
	for _, v := range []string{"1.2.0", "0.2.0", "0.3.2", "2.0.0"} {
		for _, shape := range []string{"conflist", "conf"} {
			t.Run(v+" "+shape, func(t *testing.T) {
				n := newNode(t)
				file, data := "10-pods.conflist", strings.Replace(bridgeList, `"1.0.0"`, `"`+v+`"`, 1)
				if shape == "conf" {
					file, data = "10-pods.conf", strings.Replace(bridgeConf, `"0.4.0"`, `"`+v+`"`, 1)
				}
				n.put(t, file, data, 0o644)
				before := snapshot(t, n.conf)
				_, err := n.installer(t).Install()
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), filepath.Join(n.conf, file)) ||
					!strings.Contains(err.Error(), `"`+v+`"`) || strings.Contains(err.Error(), "\n") {
					t.Errorf("install into a %s list: %v; want one line of ErrInvalid naming %s and the version", v, err, filepath.Join(n.conf, file))
				}
				sameContent(t, "conf dir", before, snapshot(t, n.conf))
				if _, err := os.Stat(filepath.Join(n.bin, BinaryName)); !os.IsNotExist(err) {
					t.Errorf("the binary was installed (%v) although install refused the primary", err)
				}
			})
		}
	}
}

// Every version the plugin speaks is chained into: the installer's list is
// the plugin's.
func TestInstallChainsIntoEveryVersionThePluginSpeaks(t *testing.T) {
	versions := config.PluginVersions().SupportedVersions()
	if len(versions) < 5 {
		t.Fatalf("the plugin speaks %v: fewer versions than it has since 0.3.0", versions)
	}
	for _, v := range versions {
		n := newNode(t)
		n.put(t, "10-pods.conflist", strings.Replace(bridgeList, `"1.0.0"`, `"`+v+`"`, 1), 0o644)
		if _, err := n.installer(t).Install(); err != nil {
			t.Errorf("install into a %s list: %v", v, err)
		}
	}
}
