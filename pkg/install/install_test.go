package install

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
)

func TestInstallChainsIntoTheLexicallyFirstValidConfigAndSkipsInvalidOnes(t *testing.T) {
	n := newNode(t)
	n.put(t, "00-broken.conflist", `{"name": "x", "plugins": [`, 0o644)
	n.put(t, "01-empty.conflist", `{"name": "x", "cniVersion": "1.0.0", "plugins": []}`, 0o644)
	n.put(t, "02-notype.conf", `{"name": "x", "cniVersion": "1.0.0"}`, 0o644)
	n.put(t, "03-noname.conflist", `{"cniVersion": "1.0.0", "plugins": [{"type": "bridge"}]}`, 0o644)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	n.put(t, "20-other.conflist", strings.ReplaceAll(bridgeList, "pods", "other"), 0o644)
	n.put(t, "05-notes.txt", "not a config", 0o644)
	before := snapshot(t, n.conf)

	res := mustInstall(t, n.installer(t))

	if res.Primary != "10-bridge.conflist" || !res.Binary {
		t.Fatalf("install chose %s (binary written %v), want 10-bridge.conflist and the binary", res.Primary, res.Binary)
	}
	if got := pluginTypes(t, n.read(t, "10-bridge.conflist")); !slices.Equal(got, []string{"bridge", "portmap", "external-ip"}) {
		t.Errorf("10-bridge.conflist plugins = %v, want our entry appended last", got)
	}
	after := snapshot(t, n.conf)
	for name, st := range before {
		if name != "10-bridge.conflist" && after[name] != st {
			t.Errorf("%s was changed; only the primary may be", name)
		}
	}
	bin, err := os.ReadFile(filepath.Join(n.bin, BinaryName))
	if want, _ := os.ReadFile(n.exe); err != nil || string(bin) != string(want) {
		t.Errorf("binary in the bin dir = %q, %v; want the installer's", bin, err)
	}
}

func TestInstallOutputLoadsInLibcniWithTheListsVersion(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	mustInstall(t, n.installer(t))
	l, err := libcni.ConfListFromFile(filepath.Join(n.conf, "10-bridge.conflist"))
	if err != nil {
		t.Fatalf("libcni refuses the chained list: %v", err)
	}
	last := l.Plugins[len(l.Plugins)-1]
	if l.CNIVersion != "1.0.0" || last.Network.Type != "external-ip" {
		t.Errorf("list version %q, last plugin %q; want 1.0.0 and external-ip", l.CNIVersion, last.Network.Type)
	}
	if strings.Contains(string(last.Bytes), "cniVersion") {
		t.Errorf("our entry keeps its own cniVersion (0.4.0 in the ConfigMap); the list's must apply: %s", last.Bytes)
	}
}

func TestInstallTurnsASinglePluginConfIntoAConflistKeepingModeAndOwner(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conf", bridgeConf, 0o640)
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	res := mustInstall(t, n.installer(t))
	if res.Primary != "10-bridge.conflist" || !slices.Equal(res.Removed, []string{"10-bridge.conf"}) {
		t.Fatalf("result %s: want 10-bridge.conflist written and 10-bridge.conf removed", describe(res))
	}
	if _, err := os.Stat(filepath.Join(n.conf, "10-bridge.conf")); !os.IsNotExist(err) {
		t.Errorf("10-bridge.conf still there (%v): the runtime would read two configs", err)
	}
	l, err := libcni.ConfListFromFile(filepath.Join(n.conf, "10-bridge.conflist"))
	if err != nil {
		t.Fatalf("libcni refuses the converted list: %v", err)
	}
	if l.CNIVersion != "0.4.0" || l.Name != "pods" || len(l.Plugins) != 2 || l.Plugins[0].Network.Type != "bridge" {
		t.Errorf("converted list: version %q name %q %d plugins; want 0.4.0, pods, bridge + external-ip", l.CNIVersion, l.Name, len(l.Plugins))
	}
	if !sameJSON(l.Plugins[0].Bytes, []byte(bridgeConf)) {
		t.Errorf("the bridge plugin was changed in the conversion: %s", l.Plugins[0].Bytes)
	}
	st := snapshot(t, n.conf)["10-bridge.conflist"]
	if st.Mode.Perm() != 0o640 || st.UID != uid || st.GID != gid {
		t.Errorf("converted file mode %v owner %d:%d, want the original's 0640 %d:%d", st.Mode, st.UID, st.GID, uid, gid)
	}
}

func TestInstallChainsIntoTheNamedPrimaryAndFindsItAfterConversion(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	n.put(t, "20-other.conf", strings.ReplaceAll(bridgeConf, "pods", "other"), 0o644)
	in := n.installer(t)
	in.Primary = "20-other.conf"
	res := mustInstall(t, in)
	if res.Primary != "20-other.conflist" {
		t.Fatalf("chained into %s, want the named 20-other.conf as 20-other.conflist", res.Primary)
	}
	if slices.Contains(pluginTypes(t, n.read(t, "10-bridge.conflist")), "external-ip") {
		t.Error("10-bridge.conflist was chained although --primary named another file")
	}
	if res := mustInstall(t, in); res.Changed() {
		t.Errorf("second install with --primary 20-other.conf changed %s; the converted file is the named one", describe(res))
	}
}

func TestInstallReplacesAnOlderEntryOfOursAndPutsItLast(t *testing.T) {
	n := newNode(t)
	old := `{"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge"},
  {"type": "external-ip", "allowedRanges": ["198.51.100.0/24"]}, {"type": "portmap"}, {"type": "external-ip"}]}`
	n.put(t, "10-bridge.conflist", old, 0o644)
	mustInstall(t, n.installer(t))
	data := n.read(t, "10-bridge.conflist")
	if got := pluginTypes(t, data); !slices.Equal(got, []string{"bridge", "portmap", "external-ip"}) {
		t.Fatalf("plugins = %v, want the old entries replaced by one, last", got)
	}
	if strings.Contains(string(data), "198.51.100.0/24") || !strings.Contains(string(data), "192.0.2.0/24") {
		t.Errorf("the old entry's ranges survived or the new ones are missing:\n%s", data)
	}
}

func TestInstallWhenAllIsInPlaceWritesNothingAndKeepsMtimes(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conf", bridgeConf, 0o644)
	in := n.installer(t)
	mustInstall(t, in)
	before, bins := snapshot(t, n.conf), snapshot(t, n.bin)
	undo := snapshot(t, filepath.Join(n.conf, undoDir))
	for range 3 {
		if res := mustInstall(t, in); res.Changed() {
			t.Fatalf("install with everything in place changed %s", describe(res))
		}
	}
	// Inode and mtime equal: not rewritten with the same bytes either.
	for what, pair := range map[string][2]map[string]fileState{
		"conf dir": {before, snapshot(t, n.conf)}, "bin dir": {bins, snapshot(t, n.bin)},
		"undo dir": {undo, snapshot(t, filepath.Join(n.conf, undoDir))},
	} {
		for name, st := range pair[0] {
			if pair[1][name] != st {
				t.Errorf("%s: %s changed (%+v -> %+v) though nothing was needed", what, name, st, pair[1][name])
			}
		}
	}
	if err := in.Check(); err != nil {
		t.Errorf("check after install: %v", err)
	}
}

func TestInstallRefusesAPrimaryItCannotChainAndChangesNothing(t *testing.T) {
	for name, data := range map[string]string{
		"old version": `{"cniVersion": "0.2.0", "name": "pods", "type": "bridge"}`,
		"no version":  `{"name": "pods", "type": "bridge"}`,
		"only ours":   `{"cniVersion": "1.0.0", "name": "pods", "type": "external-ip"}`,
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			file := "10-x.conf"
			if strings.Contains(data, "plugins") {
				file = "10-x.conflist"
			}
			n.put(t, file, data, 0o644)
			n.mustRefuse(t, file, filepath.Join(n.conf, file))
		})
	}
}

func TestInstallWithNoPrimaryInstallsTheBinaryAndSaysWhy(t *testing.T) {
	n := newNode(t)
	n.put(t, "00-broken.conf", `{`, 0o644)
	_, err := n.installer(t).Install()
	if !errors.Is(err, ErrNoPrimary) || !strings.Contains(err.Error(), "00-broken.conf") {
		t.Errorf("install: %v; want ErrNoPrimary naming the skipped 00-broken.conf", err)
	}
	if _, err := os.Stat(filepath.Join(n.bin, BinaryName)); err != nil {
		t.Errorf("binary not installed while waiting for a primary: %v", err)
	}
}

func TestInstallRefusesASymlinkedPrimary(t *testing.T) {
	n := newNode(t)
	target := filepath.Join(t.TempDir(), "elsewhere.conflist")
	writeFile(t, target, bridgeList, 0o644)
	if err := os.Symlink(target, filepath.Join(n.conf, "10-bridge.conflist")); err != nil {
		t.Fatal(err)
	}
	_, err := n.installer(t).Install()
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("install: %v; want a refusal naming the symlink", err)
	}
	if b, _ := os.ReadFile(target); string(b) != bridgeList {
		t.Errorf("the symlink's target outside the conf dir was changed:\n%s", b)
	}
}

func TestParseEntryRefusesWhatThePluginWouldRefuse(t *testing.T) {
	for _, c := range []struct{ entry, want string }{
		{`{"type": "bridge"}`, `type: "bridge" is not "external-ip"`},
		{`{"allowedRanges": []}`, "type: missing"},
		{`{"type": "external-ip", "allowedRanges": ["300.0.0.0/8"]}`, "allowedRanges"},
		{`{"type": "external-ip", "device": "a/b"}`, "device"},
		{`[1]`, "plugin config"},
		// libcni refuses the whole list over these: no pod of the node starts.
		{`{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"], "dns": 5}`, "dns: 5 is a number where libcni reads types.DNS"},
		{`{"type": "external-ip", "capabilities": {"externalIPs": "yes"}}`, `capabilities: {"externalIPs":"yes"} is a string where libcni reads bool`},
		{`{"type": "external-ip", "dns": {"nameservers": [1]}}`, "dns.nameservers: [1]"},
		{`{"type": "external-ip", "ipam": {"type": 5}}`, "ipam.type: 5"},
		// Every verb refuses these dataDirs.
		{`{"type": "external-ip", "dataDir": "/tmp"}`, `dataDir: "/tmp": is a system directory`},
		{`{"type": "external-ip", "dataDir": "/etc/cni/x"}`, `dataDir: "/etc/cni/x": is a system directory`},
	} {
		_, err := ParseEntry([]byte(c.entry))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ParseEntry(%s) = %v; want one line with %q", c.entry, err, c.want)
		}
	}
}

func TestCheckPassesOnlyWithTheBinaryAndTheChainInPlace(t *testing.T) {
	n := newNode(t)
	in := n.installer(t)
	if err := in.Check(); err == nil {
		t.Fatal("check passed on an empty node")
	}
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	mustInstall(t, in)
	if err := in.Check(); err != nil {
		t.Fatalf("check after install: %v", err)
	}
	n.put(t, "10-bridge.conflist", bridgeList, 0o644) // the primary rewrote it
	if err := in.Check(); err == nil || !strings.Contains(err.Error(), "not chained") {
		t.Errorf("check with our entry gone: %v; want not chained", err)
	}
	mustInstall(t, in)
	writeFile(t, filepath.Join(n.bin, BinaryName), "an older binary", 0o755)
	if err := in.Check(); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Errorf("check with another binary: %v; want differs", err)
	}
	os.Remove(filepath.Join(n.bin, BinaryName))
	if err := in.Check(); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("check without the binary: %v; want missing", err)
	}
}

func TestInstallWaitsWhileAnotherInstallerHoldsTheConfDir(t *testing.T) {
	n := newNode(t)
	n.put(t, "10-bridge.conflist", bridgeList, 0o644)
	unlock, err := atomicfile.LockDir(n.conf)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := n.installer(t).Install(); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("install ran (%v) while another installer held the conf dir", err)
	case <-time.After(300 * time.Millisecond):
	}
	if n.chained(t, "10-bridge.conflist")() {
		t.Fatal("the primary was chained while another installer held the conf dir")
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("install after the lock was released: %v", err)
	}
}
