package install

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

const entryJSON = `{"type": "external-ip", "cniVersion": "0.4.0", "allowedRanges": ["192.0.2.0/24"],
  "capabilities": {"io.kubernetes.cri.pod-annotations": true}}`

// bridgeList is a primary as a person writes it: its own indentation and
// key order, which a byte-for-byte restore must keep.
const bridgeList = `{
    "cniVersion": "1.0.0", "name": "pods",
    "plugins": [ { "type": "bridge", "bridge": "cni0", "ipam": { "type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]] } },
                 { "type": "portmap", "capabilities": {"portMappings": true} } ]
}
`

const bridgeConf = `{"cniVersion": "0.4.0", "name": "pods", "type": "bridge", "bridge": "cni0",
 "ipam": {"type": "host-local", "subnet": "10.88.0.0/16"}}
`

// node is a temp bin dir and conf dir, and a binary to install.
type node struct {
	bin, conf, exe string
}

func newNode(t *testing.T) *node {
	t.Helper()
	root := t.TempDir()
	n := &node{bin: filepath.Join(root, "bin"), conf: filepath.Join(root, "net.d"), exe: filepath.Join(root, "external-ip.new")}
	for _, d := range []string{n.bin, n.conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, n.exe, "#!/bin/sh\n# the plugin binary, version 2\n", 0o755)
	return n
}

func (n *node) installer(t *testing.T) *Installer {
	t.Helper()
	e, err := ParseEntry([]byte(entryJSON))
	if err != nil {
		t.Fatalf("our test entry is refused: %v", err)
	}
	return &Installer{BinDir: n.bin, ConfDir: n.conf, Entry: e, Exe: n.exe}
}

// put writes a conf dir file with a mode and an mtime in the past, so that
// a rewrite in the same second still shows.
func (n *node) put(t *testing.T, name, data string, mode fs.FileMode) {
	t.Helper()
	p := filepath.Join(n.conf, name)
	writeFile(t, p, data, mode)
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

func (n *node) read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.conf, name))
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	return b
}

// fileState is everything a byte-for-byte restore must bring back.
type fileState struct {
	Data     string
	Mode     fs.FileMode
	UID, GID uint32
	MTime    time.Time
	Inode    uint64
}

// snapshot is every entry of dir (the undo directory included), by name.
func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		s := fileState{Mode: fi.Mode(), UID: st.Uid, GID: st.Gid, MTime: fi.ModTime(), Inode: st.Ino}
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			s.Data = string(b)
		}
		out[e.Name()] = s
	}
	return out
}

// sameContent compares two snapshots as a restore must match: content,
// mode, owner and mtime (not the inode: a restore writes a new file).
func sameContent(t *testing.T, what string, want, got map[string]fileState) {
	t.Helper()
	strip := func(m map[string]fileState) map[string]fileState {
		o := map[string]fileState{}
		for k, v := range m {
			v.Inode = 0
			o[k] = v
		}
		return o
	}
	w, g := strip(want), strip(got)
	names := map[string]bool{}
	for k := range w {
		names[k] = true
	}
	for k := range g {
		names[k] = true
	}
	keys := make([]string, 0, len(names))
	for k := range names {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if w[k] != g[k] {
			t.Errorf("%s: %s differs:\nwant %+v\ngot  %+v", what, k, w[k], g[k])
		}
	}
}

// plugins decodes a conflist's plugin types, in order.
func pluginTypes(t *testing.T, data []byte) []string {
	t.Helper()
	var l struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatalf("decoding the conflist: %v\n%s", err, data)
	}
	var out []string
	for _, p := range l.Plugins {
		out = append(out, p.Type)
	}
	return out
}

// eventually waits for cond, polling, up to bound; it reports how long it took.
func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func mustInstall(t *testing.T, in *Installer) Result {
	t.Helper()
	res, err := in.Install()
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	return res
}

func describe(r Result) string { return fmt.Sprintf("%+v", r) }

// mustRefuse runs Install on n, whose primary is file, and checks that it
// refuses: one line of ErrInvalid holding each of want, the conf dir as it
// was, no binary installed.
func (n *node) mustRefuse(t *testing.T, file string, want ...string) {
	t.Helper()
	before := snapshot(t, n.conf)
	_, err := n.installer(t).Install()
	ok := errors.Is(err, ErrInvalid) && !strings.Contains(err.Error(), "\n")
	for _, w := range want {
		ok = ok && strings.Contains(err.Error(), w)
	}
	if !ok {
		t.Errorf("install into %s: %v; want one line of ErrInvalid naming %q", file, err, want)
	}
	sameContent(t, "conf dir", before, snapshot(t, n.conf))
	if _, err := os.Stat(filepath.Join(n.bin, BinaryName)); !os.IsNotExist(err) {
		t.Errorf("the binary was installed (%v) although install refused the primary", err)
	}
}
