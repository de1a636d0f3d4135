package netns

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"golang.org/x/sys/unix"
)

// pluginBin is the plugin built once for the whole suite, as a runtime would
// find it in its CNI bin directory.
var pluginBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "test/netns: these tests need root (network namespaces); run them with sudo or `make test`")
		return 1
	}
	dir, err := os.MkdirTemp("", "external-ip-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	pluginBin = filepath.Join(dir, "external-ip")
	build := exec.Command("go", "build", "-o", pluginBin, "../../plugins/external-ip")
	if tags := os.Getenv("EXTERNAL_IP_TAGS"); tags != "" {
		build.Args = append(build.Args[:2], "-tags", tags, "-o", pluginBin, "../../plugins/external-ip")
	}
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as `make build` makes it
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the plugin: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// host is a node: a network namespace with an uplink (veth) to a LAN
// namespace that plays the other hosts on the segment.
type host struct {
	t       *testing.T
	name    string // node namespace
	lan     string // LAN namespace
	dataDir string
}

// Addresses of the test LAN, from the documentation ranges.
const (
	nodeV4  = "192.0.2.1"
	lanV4   = "192.0.2.2"
	nodeV6  = "2001:db8:1::1"
	lanV6   = "2001:db8:1::2"
	subnet4 = "192.0.2.0/24"
	subnet6 = "2001:db8:1::/64"
)

func newHost(t *testing.T) *host {
	t.Helper()
	id := randomID(4)
	h := &host{t: t, name: "eipn-" + id, lan: "eipl-" + id, dataDir: t.TempDir()}
	t.Cleanup(h.destroy)
	h.sh("ip netns add %s", h.name)
	h.sh("ip netns add %s", h.lan)
	h.sh("ip -n %s link set lo up", h.name)
	h.sh("ip -n %s link set lo up", h.lan)
	h.sh("ip -n %s link add uplink0 type veth peer name lan0 netns %s", h.name, h.lan)
	// DAD off on the test LAN so that addresses are usable at once.
	for _, ns := range []string{h.name, h.lan} {
		h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0", ns)
	}
	h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.uplink0.accept_dad=0 net.ipv6.conf.uplink0.forwarding=1", h.name)
	h.sh("ip netns exec %s sysctl -qw net.ipv6.conf.lan0.accept_dad=0", h.lan)
	h.sh("ip -n %s addr add %s/24 dev uplink0", h.name, nodeV4)
	h.sh("ip -n %s addr add %s/64 dev uplink0 nodad", h.name, nodeV6)
	h.sh("ip -n %s addr add %s/24 dev lan0", h.lan, lanV4)
	h.sh("ip -n %s addr add %s/64 dev lan0 nodad", h.lan, lanV6)
	h.sh("ip -n %s link set uplink0 up", h.name)
	h.sh("ip -n %s link set lan0 up", h.lan)
	// The kernel reports carrier, and so routes IPv6 multicast (NA, DAD),
	// up to a second after the link is set up; tests start after that.
	h.waitLAN()
	return h
}

func (h *host) destroy() {
	h.waitNoCleanUp(5 * time.Second)
	exec.Command("ip", "netns", "del", h.name).Run()
	exec.Command("ip", "netns", "del", h.lan).Run()
}

// sh runs a setup command and fails the test if it fails.
func (h *host) sh(format string, args ...any) string {
	h.t.Helper()
	out, err := h.try(format, args...)
	if err != nil {
		h.t.Fatalf("%s: %v\n%s", fmt.Sprintf(format, args...), err, out)
	}
	return out
}

func (h *host) try(format string, args ...any) (string, error) {
	cmd := exec.Command("sh", "-c", fmt.Sprintf(format, args...))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// inNode runs a command in the node namespace.
func (h *host) inNode(format string, args ...any) string {
	h.t.Helper()
	return h.sh("ip netns exec %s %s", h.name, fmt.Sprintf(format, args...))
}

func randomID(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// call is one invocation of the plugin, as a runtime makes it.
type call struct {
	command     string
	containerID string
	ifName      string
	netns       string // empty is allowed for DEL
	cniArgs     string
	conf        map[string]any
}

// result is what the plugin printed and how it exited.
type result struct {
	stdout []byte
	stderr string
	err    error
	code   uint // CNI error code, 0 on success
	msg    string
}

// run execs the built plugin in the node namespace with the CNI environment
// and the config on stdin, exactly as libcni does.
func (h *host) run(c call) result {
	h.t.Helper()
	return h.runWith(pluginBin, c)
}

// runWith runs another build of the plugin, with extra environment.
func (h *host) runWith(bin string, c call, env ...string) result {
	h.t.Helper()
	return h.start(bin, c, env...).wait()
}

// started is a call of the plugin under way.
type started struct {
	cmd            *exec.Cmd
	stdout, stderr *bytes.Buffer
}

// start starts bin as runWith runs it, without waiting for it.
func (h *host) start(bin string, c call, env ...string) started {
	h.t.Helper()
	stdin, err := json.Marshal(c.conf)
	if err != nil {
		h.t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", h.name, bin)
	cmd.Env = []string{
		"CNI_COMMAND=" + c.command,
		"CNI_CONTAINERID=" + c.containerID,
		"CNI_NETNS=" + c.netns,
		"CNI_IFNAME=" + c.ifName,
		"CNI_ARGS=" + c.cniArgs,
		"CNI_PATH=" + filepath.Dir(pluginBin),
		"PATH=" + os.Getenv("PATH"),
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewReader(stdin)
	s := started{cmd: cmd, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = s.stdout, s.stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("starting %s: %v", bin, err)
	}
	return s
}

// wait waits for the call to exit and reads what it printed.
func (s started) wait() result {
	r := result{err: s.cmd.Wait(), stdout: s.stdout.Bytes(), stderr: s.stderr.String()}
	if r.err != nil {
		var e types.Error
		if json.Unmarshal(r.stdout, &e) == nil {
			r.code, r.msg = e.Code, e.Msg
		}
	}
	return r
}

// mustOK fails the test unless the call succeeded.
func (r result) mustOK(t *testing.T, what string) result {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s failed: %v: code %d %q\nstdout: %s\nstderr: %s", what, r.err, r.code, r.msg, r.stdout, r.stderr)
	}
	return r
}

// mustFail fails the test unless the call failed with code and a message
// containing every part.
func (r result) mustFail(t *testing.T, what string, code uint, parts ...string) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("%s succeeded, want CNI error %d; stdout: %s", what, code, r.stdout)
	}
	if r.code != code {
		t.Fatalf("%s: got code %d (%q), want %d", what, r.code, r.msg, code)
	}
	for _, p := range parts {
		if !strings.Contains(r.msg, p) {
			t.Fatalf("%s: message %q does not mention %q", what, r.msg, p)
		}
	}
	if strings.Contains(r.msg, "\n") {
		t.Fatalf("%s: message %q is not one line", what, r.msg)
	}
}

// netConf is a network config for the plugin with a prevResult of the
// given CNI version; extra keys are merged in.
func (h *host) netConf(cniVersion string, extra map[string]any) map[string]any {
	h.t.Helper()
	conf := map[string]any{
		"cniVersion":    cniVersion,
		"name":          "testnet",
		"type":          "external-ip",
		"dataDir":       h.dataDir,
		"allowedRanges": []string{subnet4, subnet6},
		"announce":      map[string]any{"count": 1},
		"conflictProbe": "0s",
		// These tests are about holding IPs; every container here has the
		// same prevResult, which steering would take for one container.
		// The traffic_*_test.go files steer real containers.
		"traffic":    "none",
		"prevResult": prevResult(h.t, cniVersion),
	}
	for k, v := range extra {
		conf[k] = v
	}
	return conf
}

func prevResult(t *testing.T, cniVersion string) map[string]any {
	t.Helper()
	return prevResultGiving(t, cniVersion, "10.1.0.5/24", "fd00:1::5/64")
}

// prevResultGiving is a prevResult that gives the container the addresses
// v4 and v6 (each with its prefix), on its interface eth0.
func prevResultGiving(t *testing.T, cniVersion, v4, v6 string) map[string]any {
	t.Helper()
	idx := 0
	r := &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{{Name: "eth0", Mac: "0a:58:0a:01:00:05", Sandbox: "/var/run/netns/c"}},
	}
	// One container address per family: with traffic "both" (the default)
	// ADD refuses an external IP of a family it cannot steer.
	for _, a := range []string{v4, v6} {
		p := netip.MustParsePrefix(a)
		r.IPs = append(r.IPs, &types100.IPConfig{Interface: &idx,
			Address: net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}})
	}
	conv, err := r.GetAsVersion(cniVersion)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(conv)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	return m
}

func runtimeIPs(ips ...string) map[string]any {
	return map[string]any{"externalIPs": ips}
}

// holderHas reports whether ip is on the holder device in the node. A
// missing device, or an ip command that failed, fails the test: neither
// says that the address is absent. Where the device may be gone, use
// holderAddrs.
func (h *host) holderHas(device, ip string) bool {
	h.t.Helper()
	return slices.ContainsFunc(h.holderIPs(device), hasIP(ip))
}

// hasIP matches an "ip/prefix" of ip.
func hasIP(ip string) func(string) bool {
	return func(p string) bool { return strings.HasPrefix(p, ip+"/") }
}

// deviceExists reports whether device exists in the node; an ip command
// that failed for another reason fails the test.
func (h *host) deviceExists(device string) bool {
	h.t.Helper()
	_, ok := h.ipOnDevice("link show dev %s", device)
	return ok
}

// ipOnDevice runs `ip -n NODE ARGS` about device and returns its output, or
// false when the device does not exist. Any other failure fails the test.
func (h *host) ipOnDevice(args, device string) (string, bool) {
	h.t.Helper()
	cmd := exec.Command("sh", "-c", fmt.Sprintf("ip -n %s ", h.name)+fmt.Sprintf(args, device))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil {
		return string(out), true
	}
	if strings.Contains(stderr.String(), fmt.Sprintf("Device %q does not exist", device)) {
		return "", false
	}
	h.t.Fatalf("ip %s: %v: %s", fmt.Sprintf(args, device), err, stderr.String())
	return "", false
}

// versions are the CNI versions the plugin claims.
var versions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// waitNoCleanUp waits, within limit, for the detached conntrack clean-ups
// that DELs in the node started: they write to the state directory after
// the plugin exits, and the test's TempDir is removed after destroy.
// Announcers are not waited for: they outlive a test by design.
func (h *host) waitNoCleanUp(limit time.Duration) {
	var st unix.Stat_t
	if unix.Stat(filepath.Join("/var/run/netns", h.name), &st) != nil {
		return // the namespace was never made
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if !cleanUpRunsIn(want) {
			return
		}
	}
	h.t.Logf("a conntrack clean-up still runs in %s after %s", h.name, limit)
}

// cleanUpRunsIn tells whether a process in the namespace whose link is
// netLink carries the clean-up child's environment.
func cleanUpRunsIn(netLink string) bool { return len(cleanUpsIn(netLink)) > 0 }

// cleanUpsIn lists the processes in the namespace whose link is netLink
// that carry the clean-up child's environment.
func cleanUpsIn(netLink string) []int {
	var out []int
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		if n, err := os.Readlink(p + "/ns/net"); err != nil || n != netLink {
			continue
		}
		env, err := os.ReadFile(p + "/environ")
		if err == nil && bytes.Contains(env, []byte("\x00EXTERNAL_IP_FORGET=")) {
			if pid, err := strconv.Atoi(filepath.Base(p)); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// netLink is the node namespace's link as /proc/PID/ns/net reads.
func (h *host) netLink() string {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join("/var/run/netns", h.name), &st); err != nil {
		h.t.Fatal(err)
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

// cleanUps counts the conntrack clean-up children running in the node.
func (h *host) cleanUps() int { return len(cleanUpsIn(h.netLink())) }

// killCleanUps kills the node's conntrack clean-up children, once one
// runs (within 5 s), and waits until they are gone; it returns how many.
func (h *host) killCleanUps() int {
	var pids []int
	for deadline := time.Now().Add(5 * time.Second); len(pids) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		pids = cleanUpsIn(h.netLink())
	}
	for _, pid := range pids {
		unix.Kill(pid, unix.SIGKILL)
	}
	for deadline := time.Now().Add(5 * time.Second); len(cleanUpsIn(h.netLink())) > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	return len(pids)
}
