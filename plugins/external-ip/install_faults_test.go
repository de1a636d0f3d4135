package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests run the binary (this test binary as main, see TestMain) on
// temp conf dirs, as a DaemonSet or a person runs it on a node.

// confNode is a temp node: a bin dir, a conf dir and our entry.
type confNode struct {
	root, bin, conf, entry string
}

func newConfNode(t *testing.T, entry string) *confNode {
	t.Helper()
	root := t.TempDir()
	n := &confNode{root: root, bin: filepath.Join(root, "bin"), conf: filepath.Join(root, "net.d"), entry: filepath.Join(root, "entry.json")}
	for _, d := range []string{n.bin, n.conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.write(t, n.entry, withDataDir(entry, filepath.Join(root, "state")))
	return n
}

// withDataDir gives an entry without a dataDir one in the test's temp dir:
// uninstall looks for holder devices there, never in the host's default.
func withDataDir(entry, dir string) string {
	if strings.Contains(entry, `"dataDir"`) || !strings.HasPrefix(entry, "{") {
		return entry
	}
	return `{"dataDir": "` + dir + `", ` + strings.TrimPrefix(entry, "{")
}

func (n *confNode) write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (n *confNode) dirs() []string { return []string{"--bin-dir", n.bin, "--conf-dir", n.conf} }

func (n *confNode) install(extra ...string) []string {
	return append(append([]string{"install", "--plugin-config", n.entry}, n.dirs()...), extra...)
}

func (n *confNode) uninstall(extra ...string) []string {
	return append(append([]string{"uninstall"}, n.dirs()...), extra...)
}

// binCmd is the binary run with args (no spaces in any) and no CNI_COMMAND.
func binCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "EIP_RUN_MAIN=1", "EIP_RUN_MAIN_ARGS="+strings.Join(args, " "), "CNI_COMMAND=")
	return cmd
}

// runBin runs the binary to its end: exit code and stderr.
func runBin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := binCmd(args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), errb.String()
}

// tree is every file under dir with its content, symlinks as "-> target".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "-> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		default:
			out[rel] = fi.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s is %q, was %q", what, k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s appeared: %.80q", what, k, v)
		}
	}
}

// oneLine says whether stderr's last line is the whole failure message.
func failsWith(t *testing.T, what string, code int, stderr string, parts ...string) {
	t.Helper()
	msg := strings.TrimSpace(stderr)
	lines := strings.Split(msg, "\n")
	last := lines[len(lines)-1]
	ok := code == 1
	for _, p := range parts {
		ok = ok && strings.Contains(last, p)
	}
	if !ok {
		t.Errorf("%s: exit %d, stderr %q; want exit 1 and a last line naming %q", what, code, msg, parts)
	}
}

const podsList = `{"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge"}]}`

// An entry that makes libcni refuse the whole list, or
// whose dataDir every verb refuses, is refused before anything is written,
// naming the key and the value.
func TestInstallRefusesAnEntryThatWouldBreakTheNodeAndWritesNothing(t *testing.T) {
	for _, c := range []struct{ entry, key, value string }{
		{`{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"], "dns": 5}`, "dns", "5"},
		{`{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"], "capabilities": {"externalIPs": "yes"}}`, "capabilities", `{"externalIPs":"yes"}`},
		{`{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"], "dataDir": "/tmp"}`, "dataDir", `"/tmp"`},
		{`{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"], "dataDir": "/etc/cni/x"}`, "dataDir", `"/etc/cni/x"`},
	} {
		n := newConfNode(t, c.entry)
		n.write(t, filepath.Join(n.conf, "10-pods.conflist"), podsList)
		before := tree(t, n.root)
		code, stderr := runBin(t, n.install()...)
		failsWith(t, c.entry, code, stderr, c.key, c.value)
		sameTree(t, "after a refused install", before, tree(t, n.root))
	}
}

// When the file the runtime loads first is a symlink or
// keeps its plugins in a CNI 1.1 subdirectory, install and --check refuse
// naming it, instead of chaining into the next file and saying yes.
func TestInstallAndCheckNeverChainPastThePrimaryTheRuntimeLoads(t *testing.T) {
	for name, build := range map[string]func(n *confNode){
		"symlink": func(n *confNode) {
			target := filepath.Join(n.root, "elsewhere.conflist")
			os.WriteFile(target, []byte(podsList), 0o644)
			os.Symlink(target, filepath.Join(n.conf, "05-first.conflist"))
		},
		"plugins in a subdirectory": func(n *confNode) {
			os.WriteFile(filepath.Join(n.conf, "05-first.conflist"), []byte(`{"cniVersion": "1.1.0", "name": "first"}`), 0o644)
			os.Mkdir(filepath.Join(n.conf, "first"), 0o755)
			os.WriteFile(filepath.Join(n.conf, "first", "10-bridge.conf"), []byte(`{"type": "bridge"}`), 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			n := newConfNode(t, `{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"]}`)
			build(n)
			n.write(t, filepath.Join(n.conf, "10-pods.conflist"), podsList)
			before := tree(t, n.conf)
			code, stderr := runBin(t, n.install()...)
			failsWith(t, "install", code, stderr, "05-first.conflist")
			code, stderr = runBin(t, n.install("--check")...)
			failsWith(t, "install --check", code, stderr)
			sameTree(t, "conf dir after the refusal", before, tree(t, n.conf))
		})
	}
}

const okEntry = `{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"]}`

// Turning 10-x.conf into 10-x.conflist must not replace
// another network's 10-x.conflist: install refuses, naming both files.
func TestConvertingAConfNeverReplacesAnotherNetworksConflist(t *testing.T) {
	n := newConfNode(t, okEntry)
	n.write(t, filepath.Join(n.conf, "10-x.conf"), `{"cniVersion": "1.0.0", "name": "first", "type": "bridge"}`)
	n.write(t, filepath.Join(n.conf, "10-x.conflist"), strings.ReplaceAll(podsList, "pods", "second"))
	before := tree(t, n.conf)
	code, stderr := runBin(t, n.install()...)
	failsWith(t, "install", code, stderr, "10-x.conf ", "10-x.conflist", `"second"`)
	sameTree(t, "conf dir after the refusal", before, tree(t, n.conf))
}

// A primary that had an external-ip entry, written by
// hand before the first install, gets its bytes back from uninstall.
func TestUninstallRestoresAHandWrittenEntryByteForByte(t *testing.T) {
	n := newConfNode(t, okEntry)
	original := `{"cniVersion": "1.0.0", "name": "pods",
  "plugins": [{"type": "bridge"}, {"type": "external-ip", "allowedRanges": ["198.51.100.0/24"]}]}
`
	n.write(t, filepath.Join(n.conf, "10-pods.conflist"), original)
	before := tree(t, n.conf)
	if code, stderr := runBin(t, n.install()...); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(n.conf, "10-pods.conflist")); !strings.Contains(string(b), "192.0.2.0/24") {
		t.Fatalf("install did not chain the new entry:\n%s", b)
	}
	if code, stderr := runBin(t, n.uninstall()...); code != 0 {
		t.Fatalf("uninstall: %d %s", code, stderr)
	}
	sameTree(t, "conf dir after uninstall", before, withoutMark(tree(t, n.conf)))
}

// withoutMark drops uninstall's mark, which stays for a watcher to obey.
func withoutMark(files map[string]string) map[string]string {
	for k := range files {
		if strings.HasPrefix(k, ".external-ip") {
			delete(files, k)
		}
	}
	return files
}

// syncBuffer collects a running binary's stderr.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// watcher is `install --watch` running in the background.
type watcher struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan error
}

func startWatch(t *testing.T, n *confNode) *watcher {
	t.Helper()
	w := &watcher{cmd: binCmd(n.install("--watch")...), stderr: &syncBuffer{}, done: make(chan error, 1)}
	w.cmd.Stderr = w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() { w.stop() })
	return w
}

// stop ends the watch as kubelet does, with SIGTERM, and waits for it.
func (w *watcher) stop() {
	w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		w.cmd.Process.Kill()
		<-w.done
	}
	w.done <- nil // a second stop returns at once
}

// until polls cond every 10ms up to bound.
func until(bound time.Duration, cond func() bool) bool {
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func chained(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), `"external-ip"`)
}

// `install --watch` started before the conf dir exists
// waits for it, says so, and chains once the primary CNI writes its file.
func TestWatchStartedBeforeTheConfDirExistsWaitsForIt(t *testing.T) {
	n := newConfNode(t, okEntry)
	os.Remove(n.conf)
	n.conf = filepath.Join(n.root, "etc", "cni", "net.d") // two levels missing
	w := startWatch(t, n)
	if !until(5*time.Second, func() bool { return strings.Contains(w.stderr.String(), "waiting for the conf dir") }) {
		t.Fatalf("the watch did not say it waits for the conf dir; stderr:\n%s", w.stderr)
	}
	select {
	case err := <-w.done:
		t.Fatalf("the watch exited (%v) while the conf dir is missing; stderr:\n%s", err, w.stderr)
	default:
	}
	if err := os.MkdirAll(n.conf, 0o755); err != nil {
		t.Fatal(err)
	}
	n.write(t, filepath.Join(n.conf, "10-pods.conflist"), podsList)
	// The first chaining installs the race build's binary first, which
	// took over 5 s on a loaded machine: 20 s, as the other first chainings.
	if !until(20*time.Second, func() bool { return chained(filepath.Join(n.conf, "10-pods.conflist")) }) {
		t.Fatalf("not chained within 20s of the conf dir and its primary appearing; stderr:\n%s", w.stderr)
	}
}

// Uninstall wins against an `install --watch` still
// running (a DaemonSet pod terminating after `kubectl delete` returned),
// also while the primary CNI keeps rewriting its file: once uninstall has
// returned, nothing is chained again and the binary is not written again.
// It keeps the binary, to run again as it advises; the binary and the
// watcher's mark go with the next uninstall, once the watcher stopped.
func TestUninstallWinsAgainstARunningWatch(t *testing.T) {
	const tries = 5
	for try := range tries {
		n := newConfNode(t, okEntry)
		primary := filepath.Join(n.conf, "10-pods.conflist")
		n.write(t, primary, podsList)
		before := tree(t, n.conf)
		w := startWatch(t, n)
		// The watch installs the binary first (tens of MB in the race
		// build): on a loaded CI machine that took more than 5 s.
		if !until(20*time.Second, func() bool { return chained(primary) }) {
			t.Fatalf("try %d: the watch did not chain; stderr:\n%s", try, w.stderr)
		}
		stopRewrites := rewriteEvery(primary, podsList, 150*time.Millisecond)
		bin := filepath.Join(n.bin, "external-ip")
		installed, err := os.Stat(bin)
		if err != nil {
			t.Fatalf("try %d: the watch installed no binary: %v", try, err)
		}
		code, stderr := runBin(t, n.uninstall()...)
		if code != 0 || !strings.Contains(stderr, "run "+bin+" uninstall") {
			t.Fatalf("try %d: uninstall: %d %s; want 0 and the command that finishes", try, code, stderr)
		}
		// Ten times the watch's settle time, with the primary rewriting.
		time.Sleep(time.Second)
		stopRewrites()
		if chained(primary) {
			t.Fatalf("try %d: chained again after uninstall returned; watch stderr:\n%s", try, w.stderr)
		}
		if kept, err := os.Stat(bin); err != nil || !os.SameFile(kept, installed) {
			t.Fatalf("try %d: the binary after uninstall returned: %v; want the one installed kept, not written again", try, err)
		}
		if !strings.Contains(w.stderr.String(), "external-ip uninstall ran") {
			t.Errorf("try %d: the watch did not say it stopped chaining; stderr:\n%s", try, w.stderr)
		}
		if try == 0 { // the readiness probe of the pod still running
			code, stderr := runBin(t, n.install("--check")...)
			failsWith(t, "install --check after uninstall", code, stderr, "external-ip uninstall ran")
		}
		w.stop()
		if code, stderr := runBin(t, n.uninstall()...); code != 0 {
			t.Fatalf("try %d: the second uninstall: %d %s", try, code, stderr)
		}
		sameTree(t, "conf dir once the watch stopped and uninstall ran again", before, tree(t, n.conf))
		if _, err := os.Stat(bin); !os.IsNotExist(err) {
			t.Fatalf("try %d: the binary is still there after the second uninstall (%v)", try, err)
		}
	}
}

// rewriteEvery writes data to path every d, as a primary CNI that keeps
// rewriting its config, until stopped.
func rewriteEvery(path, data string, d time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(d):
				os.WriteFile(path+".new", []byte(data), 0o644)
				os.Rename(path+".new", path)
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// With the undo file gone, uninstall removes what is
// provably ours (our entry; a binary identical to itself) and otherwise
// fails with one line naming what it left; never exit 0 with our entry in.
func TestUninstallWithoutItsUndoFileRemovesWhatIsProvablyOurs(t *testing.T) {
	for _, c := range []struct {
		name        string
		foreignBin  bool
		wantCode    int
		wantBinGone bool
	}{
		{"our binary", false, 0, true},
		{"a binary of another build", true, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newConfNode(t, okEntry)
			primary := filepath.Join(n.conf, "10-pods.conflist")
			n.write(t, primary, podsList)
			if code, stderr := runBin(t, n.install()...); code != 0 {
				t.Fatalf("install: %d %s", code, stderr)
			}
			os.Remove(filepath.Join(n.conf, ".external-ip", "undo.json"))
			bin := filepath.Join(n.bin, "external-ip")
			if c.foreignBin {
				os.WriteFile(bin, []byte("#!/bin/sh\n# another build\n"), 0o755)
			}
			code, stderr := runBin(t, n.uninstall()...)
			if c.wantCode == 0 && code != 0 {
				t.Fatalf("uninstall: %d %s; want 0", code, stderr)
			}
			if c.wantCode != 0 {
				failsWith(t, "uninstall", code, stderr, "no undo file", bin, "not this uninstaller's")
			}
			if chained(primary) {
				t.Errorf("our entry is still chained after uninstall (exit %d)", code)
			}
			if _, err := os.Stat(bin); os.IsNotExist(err) != c.wantBinGone {
				t.Errorf("binary gone: %v, want %v", os.IsNotExist(err), c.wantBinGone)
			}
		})
	}
}
