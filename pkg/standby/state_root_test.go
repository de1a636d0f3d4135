package standby

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/external-ip/external-ip/pkg/store"
)

// privateMounts runs the checks it is sent on a thread of its own mount
// namespace, made private: as the DaemonSet's container sees the host's
// /var/run/netns, mounted without propagation.
func privateMounts(t *testing.T) func(store.Netns) bool {
	t.Helper()
	asks, answers, ready := make(chan store.Netns), make(chan bool), make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with its namespace
		err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		ready <- err
		for ns := range asks {
			answers <- NetnsGone(ns)
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("a private mount namespace: %v", err)
	}
	t.Cleanup(func() { close(asks) })
	return func(ns store.Netns) bool { asks <- ns; return <-answers }
}

func netnsAdd(t *testing.T, name string) store.Netns {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if _, err := os.Stat("/var/run/netns/" + name); err == nil {
			_ = exec.Command("ip", "netns", "del", name).Run()
		}
	})
	return recorded(t, "/var/run/netns/"+name)
}

func netnsDel(t *testing.T, name string) {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v\n%s", name, err, out)
	}
}

// A node process whose mounts do not follow the host's still sees a pod's
// namespace go: one made before it started (its copy of the bind mount is
// detached when the runtime removes the file) and one made after (a plain
// file to it, which it never takes for gone while it is there).
func TestANamespaceDeletedIsSeenGoneFromAPrivateMountNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network and mount namespaces")
	}
	pre, post := fmt.Sprintf("eipsb-pre-%d", os.Getpid()), fmt.Sprintf("eipsb-post-%d", os.Getpid())
	before := netnsAdd(t, pre)
	gone := privateMounts(t)
	after := netnsAdd(t, post)
	if gone(before) || gone(after) {
		t.Fatalf("namespaces alive read as gone from a private mount namespace: made before it %v, after it %v", gone(before), gone(after))
	}
	netnsDel(t, pre)
	netnsDel(t, post)
	if !gone(before) || !gone(after) {
		t.Errorf("deleted namespaces read as alive from a private mount namespace: made before it %v, after it %v", !gone(before), !gone(after))
	}
}
