package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets a test run the binary's own main, as a person at the
// terminal runs it: with EIP_RUN_MAIN set the test binary is external-ip.
func TestMain(m *testing.M) {
	if os.Getenv("EIP_RUN_MAIN") != "" {
		os.Args = append([]string{"external-ip"}, strings.Fields(os.Getenv("EIP_RUN_MAIN_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs main with args and no CNI_COMMAND, returning its stderr.
func runMain(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "EIP_RUN_MAIN=1", "EIP_RUN_MAIN_ARGS="+strings.Join(args, " "), "CNI_COMMAND=")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.Run() // a wrong command exits 2; what matters is what it says
	return errb.String()
}

// A person who runs the binary bare, or with a command it does not know,
// learns every command, the DaemonSet's too.
func TestUsageListsEveryCommandWithNoArgumentsOrAWrongOne(t *testing.T) {
	for name, stderr := range map[string]string{
		"no arguments":          runMain(t),
		"an unknown command":    runMain(t, "frobnicate"),
		"runCLI with no args":   cliStderr(),
		"runCLI with a bad one": cliStderr("frobnicate"),
	} {
		for _, cmd := range []string{"status", "repair", "install --plugin-config", "uninstall", "version"} {
			if !strings.Contains(stderr, "external-ip "+cmd) {
				t.Errorf("%s: the usage does not list %q:\n%s", name, cmd, stderr)
			}
		}
	}
}

func cliStderr(args ...string) string {
	var out, errb bytes.Buffer
	runCLI(args, &out, &errb)
	return errb.String()
}

const testConflist = `{"cniVersion": "1.0.0", "name": "pods", "plugins": [{"type": "bridge"}]}`

// The flag names are an interface: scripts and the DaemonSet rely on them.
func TestInstallCheckAndUninstallCommandsTakeTheDocumentedFlags(t *testing.T) {
	root := t.TempDir()
	bin, conf, entry := filepath.Join(root, "bin"), filepath.Join(root, "net.d"), filepath.Join(root, "entry.json")
	os.Mkdir(bin, 0o755)
	os.Mkdir(conf, 0o755)
	os.WriteFile(filepath.Join(conf, "10-pods.conflist"), []byte(testConflist), 0o644)
	os.WriteFile(entry, []byte(withDataDir(`{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"]}`, filepath.Join(root, "state"))), 0o644)
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := runCLI(args, &out, &errb)
		return code, out.String() + errb.String()
	}
	dirs := []string{"--bin-dir", bin, "--conf-dir", conf}
	check := append([]string{"install", "--check", "--plugin-config", entry}, dirs...)
	if code, out := run(check...); code != 1 || !strings.Contains(out, "missing") {
		t.Errorf("check before install: %d %s; want 1 naming the missing binary", code, out)
	}
	if code, out := run(append([]string{"install", "--plugin-config", entry, "--primary", "10-pods.conflist"}, dirs...)...); code != 0 {
		t.Fatalf("install: %d %s", code, out)
	}
	if code, out := run(check...); code != 0 {
		t.Errorf("check after install: %d %s", code, out)
	}
	if code, out := run(append([]string{"uninstall"}, dirs...)...); code != 0 {
		t.Fatalf("uninstall: %d %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(conf, "10-pods.conflist")); string(b) != testConflist {
		t.Errorf("uninstall left %s, want the original", b)
	}
	if _, err := os.Stat(filepath.Join(bin, "external-ip")); !os.IsNotExist(err) {
		t.Errorf("binary still installed: %v", err)
	}
}

func TestInstallRefusesBadFlagsWithOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"install"}, "--plugin-config: missing"},
		{[]string{"install", "--plugin-config", "x", "--watch", "--check"}, "choose one"},
		{[]string{"install", "--plugin-config", "x", "--repair-every", "1m"}, "need --watch"},
		{[]string{"install", "--plugin-config", "/nonexistent.json"}, "--plugin-config"},
	} {
		var out, errb bytes.Buffer
		code := runCLI(c.args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), c.want) || strings.Count(strings.TrimSpace(errb.String()), "\n") > 0 {
			t.Errorf("%v: %d %q; want a failure, one line with %q", c.args, code, errb.String(), c.want)
		}
	}
}

func TestVersionPrintsTheLinkedVersionAndRevision(t *testing.T) {
	defer func(v, r string) { buildVersion, buildRevision = v, r }(buildVersion, buildRevision)
	buildVersion, buildRevision = "v9.8.7-3-gabc", "abc0123"
	var out bytes.Buffer
	if code := runCLI([]string{"version"}, &out, &out); code != 0 || strings.TrimSpace(out.String()) != "external-ip v9.8.7-3-gabc (revision abc0123)" {
		t.Errorf("version: %d %q; want the -X values", code, out.String())
	}
}

// Several failures at once (a directory where the binary goes, and no
// primary) still make one line, as every message of ours is.
func TestInstallSaysSeveralFailuresInOneLine(t *testing.T) {
	root := t.TempDir()
	bin, conf, entry := filepath.Join(root, "bin"), filepath.Join(root, "net.d"), filepath.Join(root, "entry.json")
	os.MkdirAll(filepath.Join(bin, "external-ip"), 0o755)
	os.Mkdir(conf, 0o755)
	os.WriteFile(entry, []byte(`{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"]}`), 0o644)
	var out, errb bytes.Buffer
	code := runCLI([]string{"install", "--plugin-config", entry, "--bin-dir", bin, "--conf-dir", conf}, &out, &errb)
	msg := strings.TrimSpace(errb.String())
	if code == 0 || strings.Contains(msg, "\n") || !strings.Contains(msg, bin+"/external-ip: is a directory") || !strings.Contains(msg, "no primary") {
		t.Errorf("install with a directory for the binary and no primary: exit %d, stderr %q; want one line naming both", code, msg)
	}
}

// The upkeep looks for the state where the plugin keeps it: the entry's
// dataDir by default, and a --data-dir naming another is refused rather
// than left to find nothing.
func TestTheUpkeepUsesTheEntrysDataDirAndRefusesAnother(t *testing.T) {
	entry := filepath.Join(t.TempDir(), "entry.json")
	os.WriteFile(entry, []byte(`{"type": "external-ip", "allowedRanges": ["192.0.2.0/24"], "dataDir": "/run/eip-test/state"}`), 0o644)
	var errb bytes.Buffer
	f, err := parseInstall([]string{"--plugin-config", entry, "--watch", "--repair-every", "1m"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.installer(nil); err != nil || f.dataDir != "/run/eip-test/state" {
		t.Errorf("without --data-dir the upkeep looks in %q (%v), want the entry's /run/eip-test/state", f.dataDir, err)
	}
	f, err = parseInstall([]string{"--plugin-config", entry, "--watch", "--repair-every", "1m", "--data-dir", "/run/cni/external-ip"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.installer(nil)
	if err == nil || !strings.Contains(err.Error(), `--data-dir: "/run/cni/external-ip"`) || !strings.Contains(err.Error(), "/run/eip-test/state") {
		t.Errorf("--data-dir naming another directory than the entry's: %v; want a refusal naming both", err)
	}
}
