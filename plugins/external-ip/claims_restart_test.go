//go:build metrics && kubernetes

package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The plugin reaches the claims through a socket in dataDir, which the
// claims' server cannot move: an entry reloaded with another dataDir ends
// the node process, non-zero, so that the DaemonSet starts it again to
// serve the claims there (pool ADDs failed as unavailable until then).
func TestANodeServingClaimsRestartsWhenTheEntrysDataDirChanges(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer api.Close()
	entry := `{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"]}`
	n := newConfNode(t, entry)
	n.write(t, filepath.Join(n.conf, "10-pods.conflist"), `{"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge"}]}`)
	if err := os.Mkdir(filepath.Join(n.root, "state"), 0o700); err != nil { // the DaemonSet's hostPath
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(n.root, "kubeconfig")
	n.write(t, kubeconfig, "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: "+api.URL+"}\n"+
		"contexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n")
	w := &watcher{cmd: binCmd(n.install("--watch", "--node-name", "n1", "--kubeconfig", kubeconfig)...), stderr: &syncBuffer{}, done: make(chan error, 1)}
	w.cmd.Stderr = w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(w.stop)
	if !until(20*time.Second, func() bool { return strings.Contains(w.stderr.String(), "serving claims") }) {
		t.Fatalf("the node process never served claims:\n%s", w.stderr.String())
	}
	n.write(t, n.entry, withDataDir(entry, filepath.Join(n.root, "state2")))
	select {
	case err := <-w.done:
		w.done <- err // stop's own wait
		var exit *exec.ExitError
		if !asExit(err, &exit) || exit.Sys().(syscall.WaitStatus).ExitStatus() == 0 {
			t.Errorf("the node process ended with %v; want a non-zero exit", err)
		}
		if !strings.Contains(w.stderr.String(), "restarts to serve it there") {
			t.Errorf("the node process did not say why it ended:\n%s", w.stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the node process still runs 20s after its entry's dataDir changed:\n%s", w.stderr.String())
	}
}

func asExit(err error, exit **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*exit = e
	return ok
}
