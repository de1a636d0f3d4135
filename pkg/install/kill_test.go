package install

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/external-ip/external-ip/pkg/install/internal/atomicfile"
)

// TestMain lets the test binary play a killed installer: with
// EIP_INSTALL_CHILD set it runs one Install or Uninstall and SIGKILLs itself
// at the kill point numbered EIP_INSTALL_KILL_AT.
func TestMain(m *testing.M) {
	if op := os.Getenv("EIP_INSTALL_CHILD"); op != "" {
		os.Exit(runChild(op))
	}
	os.Exit(m.Run())
}

func runChild(op string) int {
	killAt, _ := strconv.Atoi(os.Getenv("EIP_INSTALL_KILL_AT"))
	e, err := ParseEntry([]byte(entryJSON))
	if err != nil {
		return 3
	}
	n := 0
	in := &Installer{BinDir: os.Getenv("EIP_INSTALL_BIN"), ConfDir: os.Getenv("EIP_INSTALL_CONF"), Entry: e, Exe: os.Getenv("EIP_INSTALL_EXE")}
	in.fault = func(string) {
		if n++; n == killAt {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	if op == "install" {
		_, err = in.Install()
	} else {
		err = in.Uninstall()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// killedAt runs op in a child that is killed at point k; it reports
// whether the kill happened (false: the run finished before point k).
func (n *node) killedAt(t *testing.T, op string, k int) bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "EIP_INSTALL_CHILD="+op, "EIP_INSTALL_KILL_AT="+strconv.Itoa(k),
		"EIP_INSTALL_BIN="+n.bin, "EIP_INSTALL_CONF="+n.conf, "EIP_INSTALL_EXE="+n.exe)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
	}
	if err != nil {
		t.Fatalf("%s child (kill at %d): %v: %s", op, k, err, out)
	}
	return false
}

// killScenario is a node brought to the moment before the killed run.
type killScenario struct {
	name string
	op   string
	// setup prepares the node and returns the conf dir as Uninstall must
	// leave it.
	setup func(t *testing.T, n *node) map[string]fileState
	// bin is the binary Uninstall must leave; "" none.
	bin string
}

// packageBinary is a binary of ours that a package put in the bin dir.
const packageBinary = "#!/bin/sh\n# the package's external-ip\n"

var killScenarios = []killScenario{
	{"first install converting a .conf", "install", func(t *testing.T, n *node) map[string]fileState {
		n.put(t, "10-bridge.conf", bridgeConf, 0o640)
		n.put(t, "20-other.conflist", bridgeList, 0o644)
		return snapshot(t, n.conf)
	}, ""},
	{"re-chain after the primary rewrote its list, with a new binary", "install", func(t *testing.T, n *node) map[string]fileState {
		n.put(t, "10-bridge.conflist", bridgeList, 0o644)
		mustInstall(t, n.installer(t))
		n.put(t, "10-bridge.conflist", strings.ReplaceAll(bridgeList, "cni0", "cni1"), 0o644)
		writeFile(t, n.exe, "#!/bin/sh\n# version 3\n", 0o755)
		want := snapshot(t, n.conf)
		delete(want, undoDir)
		return want
	}, ""},
	{"first install over a package's binary", "install", func(t *testing.T, n *node) map[string]fileState {
		n.put(t, "10-bridge.conflist", bridgeList, 0o644)
		writeFile(t, filepath.Join(n.bin, BinaryName), packageBinary, 0o755)
		return snapshot(t, n.conf)
	}, packageBinary},
	{"uninstall putting a package's binary back", "uninstall", func(t *testing.T, n *node) map[string]fileState {
		n.put(t, "10-bridge.conflist", bridgeList, 0o644)
		want := snapshot(t, n.conf)
		writeFile(t, filepath.Join(n.bin, BinaryName), packageBinary, 0o755)
		mustInstall(t, n.installer(t))
		return want
	}, packageBinary},
	{"uninstall", "uninstall", func(t *testing.T, n *node) map[string]fileState {
		n.put(t, "10-bridge.conf", bridgeConf, 0o640)
		want := snapshot(t, n.conf)
		mustInstall(t, n.installer(t))
		return want
	}, ""},
}

func TestAKillAtAnyWriteIsUndoneByUninstallAndCompletedByInstall(t *testing.T) {
	for _, sc := range killScenarios {
		t.Run(sc.name, func(t *testing.T) {
			kills := 0
			for k := 1; ; k++ {
				if !runKilled(t, sc, k, "uninstall") {
					break
				}
				if sc.op == "install" {
					runKilled(t, sc, k, "install")
				}
				kills++
			}
			if kills < 3 {
				t.Errorf("only %d kill points: the scenario does not exercise the writes", kills)
			}
			t.Logf("%d kill points, each undone", kills)
		})
	}
}

// runKilled kills sc's run at point k, checks what the runtime would read
// then, runs next (a fresh Uninstall, or Install then Uninstall), and checks
// the conf dir is as before and the binary gone.
func runKilled(t *testing.T, sc killScenario, k int, next string) bool {
	t.Helper()
	n := newNode(t)
	want := sc.setup(t, n)
	if !n.killedAt(t, sc.op, k) {
		return false
	}
	where := fmt.Sprintf("killed at point %d, then %s", k, next)
	if _, err := findPrimary(n.conf, ""); err != nil {
		t.Errorf("%s: the runtime finds no config right after the kill: %v", where, err)
	}
	in := n.installer(t)
	if next == "install" {
		mustInstall(t, in)
		if err := in.Check(); err != nil {
			t.Errorf("%s: check after the install: %v", where, err)
		}
	}
	if err := in.Uninstall(); err != nil {
		t.Fatalf("%s: uninstall: %v", where, err)
	}
	sameContent(t, where, want, snapshot(t, n.conf))
	if b, err := os.ReadFile(filepath.Join(n.bin, BinaryName)); sc.bin == "" && !os.IsNotExist(err) {
		t.Errorf("%s: the binary is still there (%v)", where, err)
	} else if sc.bin != "" && string(b) != sc.bin {
		t.Errorf("%s: the bin dir holds %q (%v), want the package's binary back", where, b, err)
	}
	if left, _ := filepath.Glob(filepath.Join(n.bin, atomicfile.TempPattern)); len(left) > 0 {
		t.Errorf("%s: temp files left in the bin dir: %v", where, left)
	}
	return true
}
