package netns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// uninstallIn runs `external-ip uninstall` in the node, on temp CNI dirs,
// for the host's dataDir, with flags: exit code and stderr.
func (h *host) uninstallIn(t *testing.T, flags ...string) (int, string) {
	t.Helper()
	root := t.TempDir()
	bin, conf := filepath.Join(root, "bin"), filepath.Join(root, "net.d")
	os.Mkdir(bin, 0o755)
	os.Mkdir(conf, 0o755)
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.name, pluginBin, "uninstall", "--bin-dir", bin, "--conf-dir", conf, "--data-dir", h.dataDir}, flags...)...)
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
// external-ip once no pod holds an external IP; while one does, it changes
// nothing, says so in one line and exits 1.
func TestUninstallRemovesOurHolderAndTableOnceEmptyAndSaysWhatItKeeps(t *testing.T) {
	h := newHost(t)
	// Held as an address, so that the holder visibly carries the IP.
	conf := h.netConf("1.0.0", map[string]any{"traffic": "both", "hold": "address", "runtimeConfig": runtimeIPs("192.0.2.10")})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")
	if !h.deviceExists("eip0") || !h.hasTable() {
		t.Fatalf("after ADD: holder %v, table %v; the test needs both", h.deviceExists("eip0"), h.hasTable())
	}

	code, out := h.uninstallIn(t)
	if code != 1 || !strings.Contains(out, "pods still hold external IPs: holder eip0: 1 attachments hold 1 external IPs") {
		t.Errorf("uninstall while a pod holds an IP: exit %d, output %q; want 1 and a line saying what is held", code, out)
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

// nodeCommand runs the built binary, or another, with args in the node:
// exit code and output.
func (h *host) nodeCommand(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.name, bin}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("running %s %v: %v", bin, args, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// advisedRun is the command an uninstall's last line tells a person to run.
var advisedRun = regexp.MustCompile(`run (\S+) (uninstall --bin-dir \S+ --conf-dir \S+) (?:again|to finish)`)

// An uninstall while a pod still holds an IP changes nothing and exits 1:
// our entry stays chained (containerd runs a pod's DEL with the networks
// loaded then) and the binary stays for the DEL, and it says what to run
// once the pod has left. Run then, it finishes: the primary as it was,
// holder, table, binary and our directory gone.
func TestUninstallWhilePodsHoldIPsChangesNothingAndTheAdvisedCommandFinishes(t *testing.T) {
	h := newHost(t)
	dir := t.TempDir()
	binDir, confDir, entryFile := filepath.Join(dir, "bin"), filepath.Join(dir, "net.d"), filepath.Join(dir, "entry.json")
	os.Mkdir(binDir, 0o755)
	os.Mkdir(confDir, 0o755)
	primary := `{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}`
	os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(primary), 0o644)
	os.WriteFile(entryFile, []byte(fmt.Sprintf(`{"type":"external-ip","dataDir":%q,"allowedRanges":["192.0.2.0/24"]}`, h.dataDir)), 0o644)
	if code, out := h.nodeCommand(t, pluginBin, "install", "--plugin-config", entryFile, "--bin-dir", binDir, "--conf-dir", confDir); code != 0 {
		t.Fatalf("install: exit %d: %s", code, out)
	}
	installed := filepath.Join(binDir, "external-ip")
	chained, _ := os.ReadFile(filepath.Join(confDir, "10-pods.conflist"))
	conf := h.netConf("1.0.0", map[string]any{"hold": "address", "runtimeConfig": runtimeIPs("192.0.2.10")})
	h.run(attach("ADD", "c1", conf)).mustOK(t, "ADD")

	code, out := h.nodeCommand(t, installed, "uninstall", "--bin-dir", binDir, "--conf-dir", confDir)
	m := advisedRun.FindStringSubmatch(out)
	if code != 1 || !strings.Contains(out, "pods still hold external IPs: holder eip0: 1 attachments") || m == nil {
		t.Fatalf("uninstall while a pod holds an IP: exit %d, output %q; want 1, the held line and a command to run", code, out)
	}
	if m[1] != installed {
		t.Errorf("the advice runs %s, want the installed binary %s", m[1], installed)
	}
	if b, err := os.ReadFile(filepath.Join(confDir, "10-pods.conflist")); err != nil || string(b) != string(chained) {
		t.Errorf("the primary after the refused uninstall: %q, %v; want it still chained, as install left it", b, err)
	}
	if _, err := os.Stat(installed); err != nil {
		t.Errorf("the binary the pod's DEL runs is gone after the refused uninstall: %v", err)
	}

	h.run(attach("DEL", "c1", conf)).mustOK(t, "DEL")
	code, out = h.nodeCommand(t, m[1], strings.Fields(m[2])...)
	if code != 0 {
		t.Fatalf("the advised %s %s: exit %d: %s", m[1], m[2], code, out)
	}
	if _, err := os.Stat(installed); !os.IsNotExist(err) {
		t.Errorf("the installed binary is still there after the advised run (%v)", err)
	}
	if h.deviceExists("eip0") || h.hasTable() {
		t.Errorf("after the advised run: holder %v, table %v; want both gone", h.deviceExists("eip0"), h.hasTable())
	}
	if b, _ := os.ReadFile(filepath.Join(confDir, "10-pods.conflist")); string(b) != primary {
		t.Errorf("the primary after the advised run: %q; want it restored", b)
	}
	if entries, _ := os.ReadDir(confDir); len(entries) != 1 {
		t.Errorf("the conf dir after the advised run holds %v, want only the primary", entries)
	}
}
