package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// Pinned reference plugins, at the version go.mod already holds.
const (
	hostLocalPkg = "github.com/containernetworking/plugins/plugins/ipam/host-local@v1.10.0"
	portmapPkg   = "github.com/containernetworking/plugins/plugins/meta/portmap@v1.10.0"
)

// Addresses: the node's uplink is on the test LAN of test/netns, plus a /15
// from the benchmarking range so that ten thousand external IPs sit in a
// connected subnet of the uplink, which is where users take them from.
const (
	nodeV4    = "192.0.2.1/24"
	lanV4     = "192.0.2.2/24"
	nodeBench = "198.18.0.1/15"
	nodeV6    = "2001:db8:1::1/64"
	lanV6     = "2001:db8:1::2/64"
	range4    = "198.18.0.0/15"
	range6    = "2001:db8:1::/64"
)

type bench struct {
	opts  options
	root  string // repository root
	tmp   string // binaries, sources, scratch
	state string // tmpfs: every dataDir lives here
	id    string
	bins  map[string]string // name -> path
	nodes []*node
	once  sync.Once
	// trafficKey: the built plugin takes the `traffic` key; steers: with
	// `traffic: both` it made nftables rules (sanity finds both out).
	trafficKey, steers bool
	// atClose run first in close: processes started in the nodes.
	atClose []func()
}

// node is a node's network namespace with an uplink veth to a LAN namespace.
type node struct {
	name, lan string
	pod       string // a pod's namespace, the CNI_NETNS of every call
	ns        ns.NetNS
	dataDir   string
}

func newBench(o options) (*bench, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	b := &bench{opts: o, root: root, bins: map[string]string{}}
	b.id = fmt.Sprintf("%x", os.Getpid())
	if b.tmp, err = os.MkdirTemp("", "eip-bench-"); err != nil {
		return nil, err
	}
	b.state = filepath.Join(b.tmp, "state")
	if err := os.Mkdir(b.state, 0o700); err != nil {
		return nil, err
	}
	if err := unix.Mount("tmpfs", b.state, "tmpfs", 0, "mode=0700,size=512m"); err != nil {
		os.RemoveAll(b.tmp)
		return nil, fmt.Errorf("mounting a tmpfs on %s: %w", b.state, err)
	}
	if err := b.build(); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// repoRoot is the directory of the module's go.mod, as the go command
// finds it from the working directory.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || !strings.HasSuffix(mod, "go.mod") {
		return "", fmt.Errorf("run bench from inside the external-ip repository (go run ./test/bench): go env GOMOD: %q, %v", mod, err)
	}
	return filepath.Dir(mod), nil
}

// floorSrc is the exec floor: a Go program that does what every plugin must
// do at least, read stdin and write stdout.
const floorSrc = "package main\n\nimport (\"io\"; \"os\")\n\nfunc main() { io.Copy(os.Stdout, os.Stdin) }\n"

// build compiles every binary the same way: CGO_ENABLED=0, as the
// containernetworking/plugins releases are built, so that no binary pays or
// saves the dynamic loader against the others; external-ip-cgo is the one
// exception, built as a plain `go build` does, to show what that costs.
// Each is then installed into bin/ the same way too (see install).
func (b *bench) build() error {
	built, bin, floor := filepath.Join(b.tmp, "built"), filepath.Join(b.tmp, "bin"), filepath.Join(b.tmp, "floor.go")
	if err := os.WriteFile(floor, []byte(floorSrc), 0o644); err != nil {
		return err
	}
	src := b.root
	if b.opts.src != "" {
		src = b.opts.src
	}
	static, goinstall := []string{"CGO_ENABLED=0"}, []string{"CGO_ENABLED=0", "GOBIN=" + built}
	for _, s := range []struct {
		name, dir string
		env, args []string
	}{
		{"floor", b.tmp, static, []string{"build", "-o", filepath.Join(built, "floor"), floor}},
		{"host-local", b.tmp, goinstall, []string{"install", hostLocalPkg}},
		{"portmap", b.tmp, goinstall, []string{"install", portmapPkg}},
		{"external-ip", src, static, []string{"build", "-o", filepath.Join(built, "external-ip"), "./plugins/external-ip"}},
		{"external-ip-cgo", src, nil, []string{"build", "-o", filepath.Join(built, "external-ip-cgo"), "./plugins/external-ip"}},
		// Parking refused: the holding child keeps the slow sockets instead.
		{"external-ip-nopark", src, static, []string{"build", "-tags", "nopark", "-o", filepath.Join(built, "external-ip-nopark"), "./plugins/external-ip"}},
		// -ab's B; an empty dir skips it.
		{"external-ip-b", b.opts.ab, static, []string{"build", "-o", filepath.Join(built, "external-ip-b"), "./plugins/external-ip"}},
	} {
		if s.dir == "" {
			continue
		}
		logf("building %s", s.name)
		cmd := exec.Command("go", s.args...)
		cmd.Dir, cmd.Env = s.dir, append(os.Environ(), s.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", s.name, err, out)
		}
		b.bins[s.name] = filepath.Join(bin, s.name)
		if err := install(filepath.Join(built, s.name), b.bins[s.name]); err != nil {
			return err
		}
	}
	return nil
}

// install copies a built binary to its place as a node's installer does
// (a package manager, an image layer, our DaemonSet): with write(2). How a
// binary's file was written decides how its page cache is laid out, and
// that weighs on every exec: the linker writes its output through a
// shared mapping, `go install` copies from the build cache, and a `go
// build -o` binary exec'd as the linker left it started 0.4 to 0.5 ms
// slower (of 4 ms) than the same bytes copied. Copying every binary
// measures each as a node runs it, and on the same footing.
func install(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return fmt.Errorf("installing %s: %w", to, err)
	}
	return dst.Close()
}

// newNode makes a node namespace as test/netns does: uplink0 with
// 192.0.2.1/24 and 2001:db8:1::1/64 (plus the benchmarking /15),
// forwarding on (IPv4 for IPs held as routes, the default when steered),
// DAD off, and a veth to a LAN namespace. Its IGMP is not tracked: the
// bridge holder (a dummy sends none) left an entry per address, and each
// address removed then walked every node's conntrack table, the conntrack
// node's 200,000 entries, on other rows' time (docs/performance.md).
func (b *bench) newNode(tag string) (*node, error) {
	n := &node{
		name:    fmt.Sprintf("eipbench-%s-%s", b.id, tag),
		lan:     fmt.Sprintf("eipbench-%s-%s-lan", b.id, tag),
		pod:     fmt.Sprintf("eipbench-%s-%s-pod", b.id, tag),
		dataDir: filepath.Join(b.state, tag),
	}
	b.nodes = append(b.nodes, n)
	if out, err := exec.Command("sh", "-ec", n.setupScript()).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("making node %s: %v: %s", n.name, err, strings.TrimSpace(string(out)))
	}
	var err error
	if n.ns, err = ns.GetNS("/var/run/netns/" + n.name); err != nil {
		return nil, err
	}
	return n, os.MkdirAll(n.dataDir, 0o700)
}

// setupScript makes n with `ip` and `sysctl`.
func (n *node) setupScript() string {
	return strings.NewReplacer("NODE", n.name, "LAN", n.lan, "POD", n.pod).Replace(`
ip netns add NODE; ip netns add LAN; ip netns add POD
echo 'table inet eipbench { chain out { type filter hook output priority raw; ip protocol igmp notrack; }; }' | ip netns exec NODE nft -f -
ip -n NODE link set lo up; ip -n LAN link set lo up
ip -n NODE link add uplink0 type veth peer name lan0 netns LAN
ip netns exec NODE sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
ip netns exec LAN sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0
ip netns exec NODE sysctl -qw net.ipv6.conf.uplink0.accept_dad=0 net.ipv6.conf.uplink0.forwarding=1
ip netns exec NODE sysctl -qw net.ipv4.ip_forward=1
ip netns exec LAN sysctl -qw net.ipv6.conf.lan0.accept_dad=0
ip -n NODE addr add ` + nodeV4 + ` dev uplink0; ip -n NODE addr add ` + nodeBench + ` dev uplink0
ip -n NODE addr add ` + nodeV6 + ` dev uplink0 nodad
ip -n LAN addr add ` + lanV4 + ` dev lan0; ip -n LAN addr add ` + lanV6 + ` dev lan0 nodad
ip -n NODE link set uplink0 up; ip -n LAN link set lan0 up`)
}

func (b *bench) close() {
	b.once.Do(func() {
		for _, f := range b.atClose {
			f()
		}
		for _, n := range b.nodes {
			if n.ns != nil {
				n.ns.Close()
			}
			for _, name := range []string{n.name, n.lan, n.pod, n.lan + "2"} { // lan2: uplinks.go
				exec.Command("ip", "netns", "del", name).Run()
			}
		}
		// Detached announcers may still run for a second or two; a lazy
		// unmount lets them finish without holding the tmpfs.
		unix.Unmount(b.state, unix.MNT_DETACH)
		os.RemoveAll(b.tmp)
	})
}

// podPath is the CNI_NETNS of every call: a namespace that is not the
// plugin's own, as skel checks.
func (n *node) podPath() string { return "/var/run/netns/" + n.pod }
