package main

import (
	"bytes"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// Pinned reference plugins, as issue 6 names them.
const (
	noopPkg      = "github.com/containernetworking/cni/plugins/test/noop@v1.3.1"
	hostLocalPkg = "github.com/containernetworking/plugins/plugins/ipam/host-local@v1.10.0"
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
	bins  map[string]binary
	nodes []*node
	env   []string // the harness's environment, as libcni passes it on
	once  sync.Once
}

type binary struct {
	path   string
	how    string // how it was built, for the doc
	size   int64
	static bool
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
	b := &bench{opts: o, root: root, bins: map[string]binary{}, env: os.Environ()}
	id := make([]byte, 3)
	rand.Read(id)
	b.id = hex.EncodeToString(id)
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

// repoRoot is the directory of the module's go.mod, found from the working
// directory upwards.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/external-ip/external-ip")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run bench from inside the external-ip repository (go run ./test/bench)")
		}
		dir = parent
	}
}

// floorSrc is the exec floor: a Go program that does what every plugin must
// do at least, read stdin and write stdout.
const floorSrc = `package main

import (
	"io"
	"os"
)

func main() { io.Copy(os.Stdout, os.Stdin) }
`

// buildStep is one binary to build: where, with what environment and
// arguments, and how the doc describes it.
type buildStep struct {
	name, dir string
	env       []string
	args      []string
	how       string
}

// build compiles every binary the same way: CGO_ENABLED=0, as the
// containernetworking/plugins releases are built, so that no binary pays or
// saves the dynamic loader against the others. The plugin is built a second
// time as a plain `go build` builds it (cgo as the toolchain defaults), to
// show what that costs.
func (b *bench) build() error {
	bin := filepath.Join(b.tmp, "bin")
	src := filepath.Join(b.tmp, "floor")
	if err := writeFloor(bin, src); err != nil {
		return err
	}
	for _, s := range b.buildSteps(bin, src) {
		if err := b.buildOne(bin, s); err != nil {
			return err
		}
	}
	return nil
}

// writeFloor writes the exec floor's module.
func writeFloor(bin, src string) error {
	for _, d := range []string{bin, src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(floorSrc), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(src, "go.mod"), []byte("module floor\n\ngo 1.22\n"), 0o644)
}

func (b *bench) buildSteps(bin, src string) []buildStep {
	static := []string{"CGO_ENABLED=0"}
	src2, from := b.root, ""
	if b.opts.src != "" {
		src2, from = b.opts.src, " in "+b.opts.src
	}
	steps := []buildStep{
		{"floor", src, static, []string{"build", "-o", filepath.Join(bin, "floor"), "."}, "`CGO_ENABLED=0 go build` of a 9-line io.Copy(os.Stdout, os.Stdin)"},
		{"noop", b.tmp, append(static, "GOBIN="+bin), []string{"install", noopPkg}, "`CGO_ENABLED=0 go install " + noopPkg + "`"},
		{"host-local", b.tmp, append(static, "GOBIN="+bin), []string{"install", hostLocalPkg}, "`CGO_ENABLED=0 go install " + hostLocalPkg + "`"},
		{"external-ip", src2, static, []string{"build", "-o", filepath.Join(bin, "external-ip"), "./plugins/external-ip"}, "`CGO_ENABLED=0 go build ./plugins/external-ip`" + from},
		{"external-ip-cgo", src2, nil, []string{"build", "-o", filepath.Join(bin, "external-ip-cgo"), "./plugins/external-ip"}, "`go build ./plugins/external-ip` (cgo on, the toolchain's default; `make build` sets CGO_ENABLED=0)" + from},
	}
	if b.opts.candidate != "" {
		steps = append(steps, buildStep{"external-ip-candidate", b.opts.candidate, static,
			[]string{"build", "-o", filepath.Join(bin, "external-ip-candidate"), "./plugins/external-ip"},
			"`CGO_ENABLED=0 go build ./plugins/external-ip` in " + b.opts.candidate})
	}
	return steps
}

func (b *bench) buildOne(bin string, s buildStep) error {
	logf("building %s", s.name)
	cmd := exec.Command("go", s.args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), s.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", s.name, err, out)
	}
	path := filepath.Join(bin, s.name)
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	b.bins[s.name] = binary{path: path, how: s.how, size: fi.Size(), static: isStatic(path)}
	return nil
}

// isStatic reports whether an ELF file has no program interpreter.
func isStatic(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return true
}

// newNode makes a node namespace as test/netns does: uplink0 with
// 192.0.2.1/24 and 2001:db8:1::1/64 (plus the benchmarking /15), IPv6
// forwarding on, DAD off, and a veth to a LAN namespace.
func (b *bench) newNode(tag string) (*node, error) {
	n := &node{
		name:    fmt.Sprintf("eipbench-%s-%s", b.id, tag),
		lan:     fmt.Sprintf("eipbench-%s-%s-lan", b.id, tag),
		pod:     fmt.Sprintf("eipbench-%s-%s-pod", b.id, tag),
		dataDir: filepath.Join(b.state, tag),
	}
	b.nodes = append(b.nodes, n)
	for _, c := range n.setupCmds() {
		if out, err := exec.Command("sh", "-c", c).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s: %v: %s", c, err, strings.TrimSpace(string(out)))
		}
	}
	var err error
	if n.ns, err = ns.GetNS("/var/run/netns/" + n.name); err != nil {
		return nil, err
	}
	return n, os.MkdirAll(n.dataDir, 0o700)
}

// setupCmds are the `ip` and `sysctl` commands that make n.
func (n *node) setupCmds() []string {
	cmds := []string{
		"ip netns add " + n.name,
		"ip netns add " + n.lan,
		"ip netns add " + n.pod,
		"ip -n " + n.name + " link set lo up",
		"ip -n " + n.lan + " link set lo up",
		"ip -n " + n.name + " link add uplink0 type veth peer name lan0 netns " + n.lan,
	}
	for _, x := range []string{n.name, n.lan} {
		cmds = append(cmds, "ip netns exec "+x+" sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0")
	}
	return append(cmds,
		"ip netns exec "+n.name+" sysctl -qw net.ipv6.conf.uplink0.accept_dad=0 net.ipv6.conf.uplink0.forwarding=1",
		"ip netns exec "+n.lan+" sysctl -qw net.ipv6.conf.lan0.accept_dad=0",
		"ip -n "+n.name+" addr add "+nodeV4+" dev uplink0",
		"ip -n "+n.name+" addr add "+nodeBench+" dev uplink0",
		"ip -n "+n.name+" addr add "+nodeV6+" dev uplink0 nodad",
		"ip -n "+n.lan+" addr add "+lanV4+" dev lan0",
		"ip -n "+n.lan+" addr add "+lanV6+" dev lan0 nodad",
		"ip -n "+n.name+" link set uplink0 up",
		"ip -n "+n.lan+" link set lan0 up",
	)
}

// dropNode deletes a node's namespaces before the end of the run.
func (b *bench) dropNode(n *node) {
	b.nodes = slices.DeleteFunc(b.nodes, func(x *node) bool { return x == n })
	n.ns.Close()
	for _, name := range []string{n.name, n.lan, n.pod} {
		exec.Command("ip", "netns", "del", name).Run()
	}
}

func (b *bench) close() {
	b.once.Do(func() {
		if b.opts.keep {
			logf("kept: %s, namespaces eipbench-%s-*", b.tmp, b.id)
			return
		}
		for _, n := range b.nodes {
			if n.ns != nil {
				n.ns.Close()
			}
			exec.Command("ip", "netns", "del", n.name).Run()
			exec.Command("ip", "netns", "del", n.lan).Run()
			exec.Command("ip", "netns", "del", n.pod).Run()
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
