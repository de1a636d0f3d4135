package netns

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// uninstallIn runs `external-ip uninstall` in the node, on temp CNI dirs,
// for the host's dataDir: exit code and stderr.
func (h *host) uninstallIn(t *testing.T) (int, string) {
	t.Helper()
	root := t.TempDir()
	bin, conf := filepath.Join(root, "bin"), filepath.Join(root, "net.d")
	os.Mkdir(bin, 0o755)
	os.Mkdir(conf, 0o755)
	cmd := exec.Command("ip", "netns", "exec", h.name, pluginBin, "uninstall", "--bin-dir", bin, "--conf-dir", conf, "--data-dir", h.dataDir)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running uninstall: %v", err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func (h *host) hasTable() bool {
	h.t.Helper()
	out := h.inNode("nft list tables")
	return strings.Contains(out, "table inet external-ip")
}

// Uninstall removes our holder device and table inet
// external-ip once no pod holds an external IP; while one does, it keeps
// both and says so in one line.
func TestUninstallRemovesOurHolderAndTableOnceEmptyAndSaysWhatItKeeps(t *testing.T) {
	h := newHost(t)
	// Held as an address, so that the holder visibly carries the IP.
	conf := h.netConf("1.0.0", map[string]any{"traffic": "both", "hold": "address", "runtimeConfig": runtimeIPs("192.0.2.10")})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")
	if !h.deviceExists("eip0") || !h.hasTable() {
		t.Fatalf("after ADD: holder %v, table %v; the test needs both", h.deviceExists("eip0"), h.hasTable())
	}

	code, out := h.uninstallIn(t)
	if code != 0 || !strings.Contains(out, "kept: 1 attachments still hold external IPs") {
		t.Errorf("uninstall while a pod holds an IP: exit %d, output %q; want 0 and a line saying what is kept and why", code, out)
	}
	if !h.holderHas("eip0", "192.0.2.10") || !h.hasTable() {
		t.Fatal("uninstall removed the holder or the table while a pod holds an IP")
	}

	h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL")
	if code, out := h.uninstallIn(t); code != 0 {
		t.Fatalf("uninstall once the pod left: exit %d: %s", code, out)
	}
	if h.deviceExists("eip0") {
		t.Error("the empty holder eip0 is still there after uninstall")
	}
	if h.hasTable() {
		t.Errorf("table inet external-ip is still there after uninstall:\n%s", h.inNode("nft list table inet external-ip"))
	}
}

// Uninstall never removes a holder that carries addresses no record holds,
// nor a device of that name that is not ours.
func TestUninstallKeepsAHolderWithStrayAddressesAndADeviceNotOurs(t *testing.T) {
	h := newHost(t)
	conf := h.netConf("1.0.0", map[string]any{"runtimeConfig": runtimeIPs("192.0.2.10")})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")
	h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL")
	h.inNode("ip addr add 192.0.2.99/32 dev eip0")
	code, out := h.uninstallIn(t)
	if code != 0 || !strings.Contains(out, "holder eip0: kept: it carries 1 addresses that no record holds") {
		t.Errorf("uninstall with a stray address: exit %d, output %q; want 0 and the kept line", code, out)
	}
	if !h.holderHas("eip0", "192.0.2.99") {
		t.Fatal("uninstall removed a holder carrying an address")
	}
	h.inNode("ip link add eip1 type bridge")
	if code, out := h.uninstallIn(t); code != 0 || !h.deviceExists("eip1") {
		t.Errorf("uninstall: exit %d (%s); eip1, not ours, exists: %v", code, out, h.deviceExists("eip1"))
	}
}
