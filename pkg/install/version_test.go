package install

import (
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
				n.mustRefuse(t, file, filepath.Join(n.conf, file), `"`+v+`"`)
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
