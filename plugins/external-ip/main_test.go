package main

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/external-ip/external-ip/pkg/announce"
	"github.com/external-ip/external-ip/pkg/assigner"
	"github.com/external-ip/external-ip/pkg/config"
)

func TestEachKindOfErrorGetsItsCNICode(t *testing.T) {
	for _, c := range []struct {
		kind error
		want uint
	}{
		{config.ErrDecode, 6},
		{config.ErrArgs, 4},
		{config.ErrInvalid, 7},
		{assigner.ErrRefused, 7},
		{assigner.ErrLockTimeout, 11},
		{assigner.ErrState, 5},
		{assigner.ErrHost, 100},
		{announce.ErrAnnounce, 101},
		{assigner.ErrUnreachable, 102},
		{announce.ErrConflict, 103},
		{assigner.ErrDrift, 104},
		{errors.New("unexpected"), types.ErrInternal},
	} {
		err := cniError(fmt.Errorf("context: %w", c.kind), nil)
		var got *types.Error
		if !errors.As(err, &got) {
			t.Fatalf("cniError(%v) = %T, want *types.Error", c.kind, err)
		}
		if got.Code != c.want {
			t.Errorf("cniError(%v) has code %d, want %d", c.kind, got.Code, c.want)
		}
	}
	if cniError(nil, nil) != nil {
		t.Error("cniError(nil) is not nil")
	}
}

func TestErrorAboutOneIPNamesWhereItWasAskedFor(t *testing.T) {
	reqs := []config.IP{
		{Addr: netip.MustParseAddr("192.0.2.1"), Source: "runtimeConfig.externalIPs[0]"},
		{Addr: netip.MustParseAddr("192.0.2.10"), Source: "pod annotation external-ip/addresses[1]"},
	}
	// As the assigner words it: the IP first, the kind wrapped.
	err := cniError(fmt.Errorf("192.0.2.10: is already an address of interface eth0 (%w)", assigner.ErrRefused), reqs)
	msg := err.(*types.Error).Msg
	if !strings.HasPrefix(msg, "pod annotation external-ip/addresses[1]: ") {
		t.Errorf("message %q does not start with the source of 192.0.2.10", msg)
	}
}

func TestCheckComparesTheRecordWithTheRequestInAnyOrder(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")
	if err := sameIPs([]netip.Addr{a, b}, []netip.Addr{b, a}); err != nil {
		t.Errorf("the same IPs in another order: %v", err)
	}
	err := sameIPs([]netip.Addr{a, b}, []netip.Addr{a})
	if !errors.Is(err, assigner.ErrDrift) {
		t.Errorf("a record missing an IP gives %v, want ErrDrift", err)
	}
}

func TestCLIPrintsUsageForAnUnknownCommandAndReportsEmptyState(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := runCLI([]string{"frobnicate"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage: external-ip status") {
		t.Errorf("unknown command: exit %d, stderr %q; want 2 and the usage", code, errOut.String())
	}
	out.Reset()
	dir := t.TempDir()
	if code := runCLI([]string{"status", "--data-dir", dir}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "no external-ip state under "+dir) {
		t.Errorf("status of an empty dataDir: exit %d, stdout %q", code, out.String())
	}
	out.Reset()
	if code := runCLI([]string{"status", "--json", "--data-dir", dir}, &out, &errOut); code != 0 || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("status --json of an empty dataDir: exit %d, stdout %q, want []", code, out.String())
	}
}

// Our check of CNI_NETNS before the verb refuses the plugin's own
// namespace and, once passed, tells skel (through the same args, which
// skel reads after the verb) that its own check is done; the runtime's
// override still turns ours off.
func TestOurNetNSCheckStandsForSkelsAndHonoursTheRuntimesOverride(t *testing.T) {
	own, other := "/proc/thread-self/ns/net", "/nonexistent/netns"
	for _, c := range []struct {
		netns, runtime string
		refused        bool
	}{
		{own, "", true}, {other, "", false}, {own, "1", false}, {own, "true", false},
	} {
		args := &skel.CmdArgs{Netns: c.netns, NetnsOverride: c.runtime}
		err := checkNetNS(args)
		if refused := err != nil; refused != c.refused {
			t.Errorf("CNI_NETNS %s, runtime's override %q: refused %v (%v), want %v", c.netns, c.runtime, refused, err, c.refused)
		}
		if !c.refused && args.NetnsOverride == "" {
			t.Errorf("CNI_NETNS %s passed, but skel is not told its check is done", c.netns)
		}
	}
}

// growStack's frame must stay on the stack: moved to the heap, it would
// grow nothing and cost an allocation of its size.
func TestGrowStackAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(10, growStack); n != 0 {
		t.Errorf("growStack allocates %v times a call, want 0", n)
	}
}

// A --device that is no interface name would be a path under --data-dir:
// "../outside" made repair create its state directories beside dataDir.
func TestCLIRefusesADeviceThatIsNoInterfaceNameAndCreatesNothing(t *testing.T) {
	for _, c := range [][]string{
		{"repair", "--device", "../outside"},
		{"status", "--device", "../../x"},
		{"status", "--json", "--device", "eip%d"},
		{"repair", "--device", "eip0/x"},
	} {
		// The directories a bad name points at exist: state is made only
		// inside an existing directory.
		parent := t.TempDir()
		dataDir := filepath.Join(parent, "data", "run")
		for _, d := range []string{dataDir, filepath.Join(parent, "data", "outside"), filepath.Join(dataDir, "eip0"), filepath.Join(parent, "x")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		before := tree(t, parent)
		var out, errOut bytes.Buffer
		code := runCLI(append(c, "--data-dir", dataDir), &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), "--device: ") || !strings.Contains(errOut.String(), strconv.Quote(c[len(c)-1])) {
			t.Errorf("%v: exit %d, stderr %q; want non-zero and an error naming --device and its value", c, code, errOut.String())
		}
		if after := tree(t, parent); !maps.Equal(after, before) {
			t.Errorf("%v changed the files under %s from %v to %v", c, parent, before, after)
		}
	}
}

// A log that cannot be opened is a config error named by its key and
// value alone, as the other config errors read; a DEL or a read goes on
// without it.
func TestALogThatCannotBeOpenedFailsOnlyADDNamingTheFile(t *testing.T) {
	to := &announce.PlanLog{File: filepath.Join(t.TempDir(), "gone", "external-ip.log"), Level: "info"}
	_, _, err := openLog(to)
	want := fmt.Sprintf("logFile: %q cannot be opened: no such file or directory", to.File)
	if !errors.Is(err, config.ErrInvalid) || err.Error() != want {
		t.Errorf("openLog of a file in a missing directory: %v; want %q of kind ErrInvalid", err, want)
	}
	log, done, err := logOrDiscard(to)
	if err != nil || log == nil {
		t.Fatalf("logOrDiscard failed: %v", err)
	}
	log.Error("goes nowhere")
	done()
	if _, err := os.Stat(filepath.Dir(to.File)); err == nil {
		t.Errorf("logOrDiscard made the log's directory")
	}
}
