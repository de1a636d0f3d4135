package install

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/external-ip/external-ip/test/logbuf"
)

// runtimePick is the file a runtime loads first, by libcni itself, as
// containerd's go-cni and CRI-O's ocicni call it: "" when none loads.
func runtimePick(t *testing.T, dir string) string {
	t.Helper()
	paths, err := libcni.ConfFiles(dir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	for _, p := range paths {
		if filepath.Ext(p) == ".conflist" {
			if _, err := libcni.ConfListFromFile(p); err == nil {
				return filepath.Base(p)
			}
			continue
		}
		if c, err := libcni.ConfFromFile(p); err == nil {
			if _, err := libcni.ConfListFromConf(c); err == nil {
				return filepath.Base(p)
			}
		}
	}
	return ""
}

const (
	subdirList = `{"cniVersion": "1.1.0", "name": "sub"}`
	subdirOne  = `{"type": "bridge", "bridge": "cni1"}`
)

// oddConfDirs are conf dirs where a loader of our own went wrong or could:
// symlinks (to a file, a directory, nowhere), CNI 1.1 lists that keep their
// plugins in a <name>/ subdirectory, directories named like configs, a
// list that names an empty subdirectory, and broken files before them.
var oddConfDirs = map[string]func(t *testing.T, dir string){
	"a symlink first": func(t *testing.T, dir string) {
		link(t, dir, writeIn(t, t.TempDir(), "x.conflist", bridgeList), "05-link.conflist")
		writeIn(t, dir, "10-bridge.conflist", bridgeList)
	},
	"a symlinked .conf first": func(t *testing.T, dir string) {
		link(t, dir, writeIn(t, dir, "x.txt", bridgeConf), "05-link.conf")
		writeIn(t, dir, "10-bridge.conflist", bridgeList)
	},
	"a dangling symlink first": func(t *testing.T, dir string) {
		link(t, dir, filepath.Join(dir, "nowhere"), "05-link.conflist")
		writeIn(t, dir, "10-bridge.conflist", bridgeList)
	},
	"a symlink to a directory first": func(t *testing.T, dir string) {
		link(t, dir, t.TempDir(), "05-link.conflist")
		writeIn(t, dir, "10-bridge.conflist", bridgeList)
	},
	"a CNI 1.1 list with plugins in its subdirectory first": func(t *testing.T, dir string) {
		writeIn(t, dir, "05-sub.conflist", subdirList)
		os.Mkdir(filepath.Join(dir, "sub"), 0o755)
		writeIn(t, filepath.Join(dir, "sub"), "10-bridge.conf", subdirOne)
		writeIn(t, dir, "10-bridge.conflist", bridgeList)
	},
	"a list with inline plugins and more in its subdirectory": func(t *testing.T, dir string) {
		writeIn(t, dir, "05-sub.conflist", `{"cniVersion": "1.1.0", "name": "sub", "plugins": [{"type": "bridge"}]}`)
		os.Mkdir(filepath.Join(dir, "sub"), 0o755)
		writeIn(t, filepath.Join(dir, "sub"), "20-portmap.conf", `{"type": "portmap"}`)
		writeIn(t, dir, "10-bridge.conflist", bridgeList)
	},
	"a CNI 1.1 list with an empty subdirectory": func(t *testing.T, dir string) {
		writeIn(t, dir, "05-sub.conflist", subdirList)
		os.Mkdir(filepath.Join(dir, "sub"), 0o755)
		writeIn(t, dir, "10-bridge.conflist", bridgeList)
	},
	"a list loading only inline plugins beside a subdirectory": func(t *testing.T, dir string) {
		writeIn(t, dir, "05-sub.conflist", `{"cniVersion": "1.1.0", "name": "sub", "loadOnlyInlinedPlugins": true, "plugins": [{"type": "bridge"}]}`)
		os.Mkdir(filepath.Join(dir, "sub"), 0o755)
		writeIn(t, filepath.Join(dir, "sub"), "20-portmap.conf", `{"type": "portmap"}`)
	},
	"a subdirectory plugin that does not load": func(t *testing.T, dir string) {
		writeIn(t, dir, "05-sub.conflist", subdirList)
		os.Mkdir(filepath.Join(dir, "sub"), 0o755)
		writeIn(t, filepath.Join(dir, "sub"), "10-bad.conf", `{"type": 5}`)
		writeIn(t, dir, "10-bridge.conflist", bridgeList)
	},
	"a directory named like a config first": func(t *testing.T, dir string) {
		os.Mkdir(filepath.Join(dir, "05-dir.conflist"), 0o755)
		writeIn(t, dir, "10-bridge.conf", bridgeConf)
	},
	"broken, null-typed and plugin-less files first": func(t *testing.T, dir string) {
		writeIn(t, dir, "01-null.conflist", `{"name": null, "plugins": [{"type": "bridge"}]}`)
		writeIn(t, dir, "02-bool.conflist", `{"name": "x", "disableCheck": "yes", "plugins": [{"type": "bridge"}]}`)
		writeIn(t, dir, "03-list.conf", bridgeList)
		writeIn(t, dir, "04-none.conflist", `{"name": "x", "loadOnlyInlinedPlugins": true}`)
		writeIn(t, dir, "20-bridge.json", bridgeConf)
	},
	"a .conf that sorts before its own .conflist": func(t *testing.T, dir string) {
		writeIn(t, dir, "10-x.conf", bridgeConf)
		writeIn(t, dir, "10-x.conflist", strings.ReplaceAll(bridgeList, "pods", "other"))
	},
	"nothing that loads": func(t *testing.T, dir string) {
		writeIn(t, dir, "01-empty.conflist", `{"name": "x", "plugins": []}`)
	},
}

func writeIn(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	writeFile(t, p, data, 0o644)
	return p
}

func link(t *testing.T, dir, target, name string) {
	t.Helper()
	if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// settle dates every regular file under dir long ago: a conf dir whose
// writers are done (a file that does not load and changed just now may
// be half-written, and install waits for it).
func settle(t *testing.T, dir string) {
	t.Helper()
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			err = os.Chtimes(path, old, old)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The file install chains into, and the one --check checks, is the file
// libcni loads first, on every odd conf dir once its writers are done:
// install either chains into it or refuses naming it, never chains into
// another file.
func TestInstallAndCheckPickTheFileLibcniLoadsOnOddConfDirs(t *testing.T) {
	for name, build := range oddConfDirs {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			build(t, n.conf)
			settle(t, n.conf)
			want := runtimePick(t, n.conf)
			res, err := n.installer(t).Install()
			switch {
			case want == "":
				if !errors.Is(err, ErrNoPrimary) {
					t.Fatalf("libcni loads no file; install: %v, want ErrNoPrimary", err)
				}
			case err == nil:
				if res.Source != want {
					t.Fatalf("install chained into %s; libcni loads %s", res.Source, want)
				}
				if err := n.installer(t).Check(); err != nil {
					t.Errorf("check after install: %v", err)
				}
				l, err := libcni.ConfListFromFile(filepath.Join(n.conf, res.Primary))
				if err != nil || l.Plugins[len(l.Plugins)-1].Network.Type != PluginType {
					t.Errorf("libcni loads %s with our entry not last (%v): the runtime would not run it last", res.Primary, err)
				}
			default:
				if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("install: %v; libcni loads %s: a refusal must name it, on one line", err, want)
				}
				exe, _ := os.ReadFile(n.exe) // so that only the primary can fail the check
				writeFile(t, filepath.Join(n.bin, BinaryName), string(exe), 0o755)
				if cerr := n.installer(t).Check(); cerr == nil || !strings.Contains(cerr.Error(), want) {
					t.Errorf("check: %v; want a failure naming %s", cerr, want)
				}
			}
		})
	}
}

const (
	calicoList   = `{"cniVersion": "1.0.0", "name": "k8s-pod-network", "plugins": [{"type": "calico"}, {"type": "portmap", "capabilities": {"portMappings": true}}]}`
	loopbackConf = `{"cniVersion": "0.3.1", "name": "lo", "type": "loopback"}`
)

// A primary that rewrites its file in place (truncate, then write) leaves
// it empty or cut short for a moment. An install that runs then (the
// truncate's own event) must not take the next file for the primary: it
// would chain a network the runtime uses only for that moment, convert
// it if it is a .conf, and leave it so until uninstall. It waits, and
// once the write ends chains the primary alone.
func TestInstallWaitsWhileThePrimaryIsHalfWritten(t *testing.T) {
	for name, partial := range map[string]string{"empty": "", "cut short": calicoList[:40]} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t)
			n.put(t, "99-loopback.conf", loopbackConf, 0o644)
			writeFile(t, filepath.Join(n.conf, "10-calico.conflist"), partial, 0o644) // written just now
			before := snapshot(t, n.conf)
			_, err := n.installer(t).Install()
			if !errors.Is(err, ErrNoPrimary) || !strings.Contains(err.Error(), "10-calico.conflist") || strings.Contains(err.Error(), "\n") {
				t.Errorf("install over a half-written first file: %v; want one line of ErrNoPrimary naming 10-calico.conflist", err)
			}
			during := snapshot(t, n.conf)
			delete(during, undoDir) // the binary's record: it goes in while install waits
			sameContent(t, "conf dir while the primary is half-written", before, during)
			writeFile(t, filepath.Join(n.conf, "10-calico.conflist"), calicoList, 0o644) // the write ends
			if res := mustInstall(t, n.installer(t)); res.Primary != "10-calico.conflist" {
				t.Errorf("chained %s once the primary was written, want 10-calico.conflist", res.Primary)
			}
			after := snapshot(t, n.conf)
			if after["99-loopback.conf"] != before["99-loopback.conf"] || after["99-loopback.conflist"] != (fileState{}) {
				t.Errorf("the next network's 99-loopback.conf was changed or converted: %+v", after)
			}
		})
	}
}

// A first file that stays broken is what the runtime passes over, for
// good: install chains the next file, as before, and says which file it
// passed over and why, instead of waiting forever or saying nothing.
func TestInstallPassesOverAFirstFileThatStaysBrokenAndSaysSo(t *testing.T) {
	n := newNode(t)
	n.put(t, "99-loopback.conf", loopbackConf, 0o644)
	n.put(t, "10-calico.conflist", calicoList[:40], 0o644) // last changed long ago
	in := n.installer(t)
	logs := &logbuf.Buffer{}
	in.Log = logs.Logger()
	if res := mustInstall(t, in); res.Primary != "99-loopback.conflist" {
		t.Fatalf("chained %s; the runtime loads 99-loopback.conf", res.Primary)
	}
	if !strings.Contains(logs.String(), "10-calico.conflist") || !strings.Contains(logs.String(), `"level":"WARN"`) {
		t.Errorf("passing over the broken 10-calico.conflist was not logged as a warning naming it:\n%s", logs)
	}
}
