package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/external-ip/external-ip/test/fullfs"
)

// stateLeft lists what a failed ADD of containerID must not leave in the
// state directory dir: a journal, staged writes, the attachment's record,
// an index entry of any of ips.
func stateLeft(t *testing.T, dir string, ips ...string) []string {
	t.Helper()
	var left []string
	if _, err := os.Lstat(filepath.Join(dir, "journal")); err == nil {
		left = append(left, "journal")
	}
	for _, sub := range []string{"tmp", "att"} {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("reading %s: %v", sub, err)
		}
		for _, e := range entries {
			left = append(left, sub+"/"+e.Name())
		}
	}
	for _, ip := range ips {
		if _, err := os.Lstat(filepath.Join(dir, "ip", ip+".json")); err == nil {
			left = append(left, "ip/"+ip+".json")
		}
	}
	return left
}

// withoutNetAdmin is a wrapper that runs the plugin without CAP_NET_ADMIN,
// as root: the kernel then refuses every netlink change.
func withoutNetAdmin(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv (util-linux) is needed to drop CAP_NET_ADMIN: %v", err)
	}
	w := filepath.Join(t.TempDir(), "external-ip-nocap")
	script := fmt.Sprintf("#!/bin/sh\nexec setpriv --inh-caps=-net_admin --bounding-set=-net_admin %s \"$@\"\n", pluginBin)
	if err := os.WriteFile(w, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestAnAddWithoutNetAdminFailsInOneLineAndLeavesNoState(t *testing.T) {
	h := newHost(t)
	conf := func(ips ...string) map[string]any {
		return h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs(ips...)})
	}
	h.run(attach("ADD", "b", conf("192.0.2.10"))).mustOK(t, "ADD b")
	before := h.view()

	r := h.runWith(withoutNetAdmin(t), attach("ADD", "a", conf("192.0.2.20", "2001:db8:1::20")))
	r.mustFail(t, "ADD without CAP_NET_ADMIN", 100, "192.0.2.20")
	if left := stateLeft(t, filepath.Join(h.dataDir, "eip0"), "192.0.2.20", "2001:db8:1::20"); len(left) != 1 || !strings.HasPrefix(left[0], "att/") {
		// att/ holds b's record alone.
		t.Errorf("ADD without CAP_NET_ADMIN left %v, want b's record alone", left)
	}
	h.mustBeUnchanged(t, "after an ADD without CAP_NET_ADMIN", before)

	// The next invocation has nothing to finish, and the runtime's DEL and
	// a retried ADD with the capability work.
	h.run(attach("DEL", "a", conf())).mustOK(t, "DEL a")
	h.mustBeUnchanged(t, "after DEL of the failed ADD", before)
	h.run(attach("ADD", "a", conf("192.0.2.20"))).mustOK(t, "retried ADD a")
	h.mustHold(t, "after the retried ADD", "eip0", "192.0.2.10/32", "192.0.2.20/32")
}

// On a full state filesystem an ADD either succeeds whole or fails with
// code 5 in one line and leaves no journal, record, index entry, staged
// file or address; the next invocation finds nothing to complete.
func TestAnAddOnAFullStateFilesystemLeavesNothingBehind(t *testing.T) {
	h := newHost(t)
	failed, succeeded := 0, 0
	for pages := 0; pages <= 6; pages++ {
		dataDir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dataDir, 0o700); err != nil {
			t.Fatal(err)
		}
		free := fullfs.Mount(t, dataDir, pages)
		device := fmt.Sprintf("eipk%d", pages)
		v4, v6 := fmt.Sprintf("192.0.2.%d", 30+pages), fmt.Sprintf("2001:db8:1::%d", 30+pages)
		conf := func(ips ...string) map[string]any {
			return h.netConf("1.0.0", map[string]any{"dataDir": dataDir, "device": device, "runtimeConfig": runtimeIPs(ips...)})
		}
		r := h.run(attach("ADD", "a", conf(v4, v6)))
		if r.err == nil {
			succeeded++
			free()
			h.run(attach("DEL", "a", conf())).mustOK(t, "DEL after the ADD that fitted")
			continue
		}
		failed++
		r.mustFail(t, fmt.Sprintf("ADD with %d pages free", pages), 5, "no space left on device")
		check := func(when string) {
			if left := stateLeft(t, filepath.Join(dataDir, device), v4, v6); len(left) > 0 {
				t.Errorf("%d pages free, %s: left %v", pages, when, left)
			}
			if h.holderHasIfThere(device, v4) || h.holderHasIfThere(device, v6) || h.proxied(v6, "uplink0") {
				t.Errorf("%d pages free, %s: %s or %s left on %s (or its proxy entry)", pages, when, v4, v6, device)
			}
		}
		check("after the failed ADD")
		free()
		h.run(attach("DEL", "other", conf())).mustOK(t, "the next invocation")
		check("after the next invocation")
	}
	if failed < 3 || succeeded == 0 {
		t.Errorf("%d ADDs failed and %d fitted: the fill did not reach the steps it should", failed, succeeded)
	}
	t.Logf("%d ADDs failed for want of room, %d fitted", failed, succeeded)
}

// Through the binary: a dangling lock symlink fails ADD with code 5 naming
// it and creates nothing outside dataDir; a journal planted under a
// world-writable parent is refused with code 7 and never replayed.
func TestPlantedStateIsRefusedThroughTheBinary(t *testing.T) {
	h := newHost(t)
	conf := func(dataDir string, ips ...string) map[string]any {
		return h.netConf("1.0.0", map[string]any{"dataDir": dataDir, "runtimeConfig": runtimeIPs(ips...)})
	}
	h.run(attach("ADD", "b", conf(h.dataDir, "192.0.2.10"))).mustOK(t, "ADD b")
	target := filepath.Join(t.TempDir(), "planted")
	lock := filepath.Join(h.dataDir, "eip0", "lock")
	if err := errors.Join(os.Remove(lock), os.Symlink(target, lock)); err != nil {
		t.Fatal(err)
	}
	h.run(attach("ADD", "a", conf(h.dataDir, "192.0.2.20"))).mustFail(t, "ADD with a dangling lock symlink", 5, lock, "symlink")
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lock symlink's target %s was created (%v)", target, err)
	}

	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(open, "state")
	dev := filepath.Join(dataDir, "eip1")
	if err := os.MkdirAll(dev, 0o700); err != nil {
		t.Fatal(err)
	}
	journal := `{"key":"x","record":{"network":"testnet","containerID":"x","ifName":"eth0","ips":["192.0.2.254"]},"touch":["192.0.2.254"]}`
	if err := os.WriteFile(filepath.Join(dev, "journal"), []byte(journal), 0o600); err != nil {
		t.Fatal(err)
	}
	// A device of its own: eip0 belongs to the first dataDir, which would
	// refuse this one before its parent is judged.
	planted := conf(dataDir, "192.0.2.20")
	planted["device"] = "eip1"
	h.run(attach("ADD", "a", planted)).mustFail(t, "ADD under a world-writable parent", 7, `dataDir: "`+dataDir+`"`, open)
	if h.holderHas("eip0", "192.0.2.254") || h.deviceExists("eip1") {
		t.Error("the planted journal was replayed or the refused ADD assigned its IP")
	}
}

// A DEL under a dataDir the safety rules refuse fails with code 7 as every
// verb does: its records cannot be trusted, so it releases nothing. The
// holder is marked for that dataDir, so its state cannot be moved to
// another: the admin makes the dataDir safe where it is, runs `external-ip
// repair`, and the DEL the runtime retries finishes.
func TestADelUnderARefusedDataDirFailsWith7UntilTheDataDirIsMadeSafe(t *testing.T) {
	h := newHost(t)
	open := t.TempDir()
	dataDir := filepath.Join(open, "state")
	del := func(dataDir string) call {
		conf := h.netConf("1.1.0", map[string]any{"dataDir": dataDir})
		conf["name"] = "net-a"
		return call{command: "DEL", containerID: "a", ifName: "eth0", conf: conf}
	}
	h.addOnDir(dataDir, "net-a", "a", "192.0.2.10").mustOK(t, "ADD under a safe dataDir")
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	before := h.view()
	h.run(del(dataDir)).mustFail(t, "DEL once dataDir's parent is world-writable", 7, `dataDir: "`+dataDir+`"`, open)
	h.mustBeUnchanged(t, "the refused DEL", before)
	h.mustHold(t, "after the refused DEL", "eip0", "192.0.2.10/32")

	moved := filepath.Join(h.dataDir, "moved")
	if err := os.Rename(dataDir, moved); err != nil {
		t.Fatal(err)
	}
	out, err := h.try("ip netns exec %s %s repair --data-dir %s", h.name, pluginBin, moved)
	if err == nil || !strings.Contains(out, "holds the external IPs of dataDir "+dataDir) {
		t.Errorf("repair of the state moved to another dataDir = %v:\n%s\nwant it refused: the holder is %s's", err, out, dataDir)
	}
	if err := errors.Join(os.Rename(moved, dataDir), os.Chmod(open, 0o755)); err != nil {
		t.Fatal(err)
	}
	h.inNode("%s repair --data-dir %s", pluginBin, dataDir)
	h.run(del(dataDir)).mustOK(t, "the retried DEL once dataDir is safe")
	if h.holderHas("eip0", "192.0.2.10") {
		t.Error("192.0.2.10 is still on eip0 after the retried DEL")
	}
}
