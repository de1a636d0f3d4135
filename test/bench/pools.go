package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/external-ip/external-ip/test/bench/poolrows"
)

// The pool rows (package poolrows): what the cluster's pools cost an ADD,
// against a real API server when the e2e's Kubernetes build is cached
// (building it takes 20 to 40 minutes, which a benchmark does not start),
// beside the empty node's explicit-IP row of the same run (today's path:
// no pools published, one missing file read); and, with -pools-baseline
// REV, the explicit-IP ADD of REV's build (the plugin before pools) on the
// empty node.
var rowBaseline = poolrows.Row("explicit IP, build before pools")

// poolUnits adds the pool rows to res: the node-local pool's always, the
// cluster's when the Kubernetes build is cached (a logged SKIP otherwise).
func poolUnits(b *bench, res *results, n0 *node) error {
	if err := baselineUnit(b, res, n0); err != nil {
		return err
	}
	poolrows.LocalRow(poolSeam{b, res}, n0, 3_000_000)
	out, err := exec.Command(filepath.Join(b.root, "test/e2e/kubernetes/build.sh"), "--check").CombinedOutput()
	if err != nil {
		logf("SKIP the pool rows against an API server: no cached Kubernetes build (test/e2e/kubernetes/build.sh --check: %s)", strings.TrimSpace(string(out)))
		return nil
	}
	rows := poolrows.New(poolrows.Config{Root: b.root, Dir: filepath.Join(b.tmp, "pools"), K8s: strings.TrimSpace(string(out)),
		Built: filepath.Join(b.tmp, "built", "external-ip-node"), Plugin: b.bins["external-ip"],
		Addr: strings.TrimSuffix(nodeV4, "/24"), Ranges: []string{range4, range6}, Warmup: b.opts.warmup, N: b.opts.n})
	b.atClose = append(b.atClose, rows.Close)
	if err := rows.Start(poolSeam{b, res}); err != nil {
		return fmt.Errorf("pool rows: %w", err)
	}
	return nil
}

// poolSeam is the bench as the pool rows see it (and standbySeam).
type poolSeam struct {
	b   *bench
	res *results
}

func (n *node) NetNS() string   { return n.name }
func (n *node) DataDir() string { return n.dataDir }

func (s poolSeam) NewNode(tag string) (poolrows.Node, error) { return s.b.newNode(tag) }
func (s poolSeam) Logf(format string, args ...any)           { logf(format, args...) }

func (s poolSeam) Pair(row string, n poolrows.Node, k int, mk func(it int) poolrows.Call) {
	a4, _ := containerAddrs(k)
	s.b.pair(s.res, row, "pools", n.(*node), func(it int) call { return s.call(n.(*node), k, mk(it)) }, a4)
}

func (s poolSeam) Check(n poolrows.Node, k int, c poolrows.Call, dumps [][]string, want []string) ([]string, error) {
	return s.b.checkPair(n.(*node), s.call(n.(*node), k, c), dumps, want)
}

// call is attachment k's ADD with the default traffic, changed as the pool
// row says: its runtimeConfig, sandbox and CNI_ARGS.
func (s poolSeam) call(n *node, k int, pc poolrows.Call) call {
	c := s.b.eipCall(s.b.bins["external-ip"], "ADD", n, k, s.b.defaultTraffic())
	c.stdin = withKeys(c.stdin, pc.Conf, map[string]any{"runtimeConfig": pc.RuntimeConfig})
	c.containerID, c.env = pc.ContainerID, pc.Env
	return c
}

// beforePools is main's last commit before the pools' code, the plugin an
// explicit-IP ADD today is held against (a shallow clone: the row is left out).
const beforePools = "f5168a494e68da415ff5475aacc5147843b77f9f"

// -pools-baseline (the plugin before pools) on the empty node, when the
// repository has that revision.
func baselineUnit(b *bench, res *results, n0 *node) error {
	rev := b.opts.poolsBaseline
	if rev == "" {
		return nil
	}
	if err := exec.Command("git", "-C", b.root, "rev-parse", "--verify", "-q", rev+"^{commit}").Run(); err != nil {
		logf("SKIP the row %q: no revision %s in the repository", rowBaseline, rev)
		return nil
	}
	src, built := filepath.Join(b.tmp, "baseline"), filepath.Join(b.tmp, "built", "external-ip-baseline")
	logf("building external-ip from %s (the row %q)", rev, rowBaseline)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	script := fmt.Sprintf("git -C %q archive --format=tar %q | tar -x -C %q && cd %q && CGO_ENABLED=0 go build -o %q ./plugins/external-ip", b.root, rev, src, src, built)
	if out, err := exec.Command("sh", "-ec", script).CombinedOutput(); err != nil {
		return fmt.Errorf("building %s's plugin: %v\n%s", rev, err, out)
	}
	b.bins["external-ip-baseline"] = filepath.Join(b.tmp, "bin", "external-ip-baseline")
	if err := install(built, b.bins["external-ip-baseline"]); err != nil {
		return err
	}
	b.eipPair(res, rowBaseline, "pools", n0, "external-ip-baseline", 77, false, b.defaultTraffic())
	return nil
}

// runOnly is -pools-only and -standby-only: the group's phase alone.
func runOnly(b *bench, group func(*bench, *results, *node) error) error {
	res, n0, err := emptyNode(b)
	if err != nil {
		return err
	}
	return b.phase(res, n0, group)
}

// phase runs the exec floor, host-local, the empty node's explicit-IP
// row and group's rows on n0, in iterations of their own, and reports
// them.
func (b *bench) phase(res *results, n0 *node, group func(*bench, *results, *node) error) error {
	// referenceUnits' first two units are the floor and host-local; portmap's
	// (a second per iteration on a loaded machine) are left out.
	ref := &results{byName: map[string]*series{}}
	b.referenceUnits(ref, n0, n0)
	for _, s := range ref.rows {
		if !strings.HasPrefix(s.name, "portmap") {
			res.rows, res.byName[s.name] = append(res.rows, s), s
		}
	}
	res.units = append(res.units, ref.units[:2]...)
	b.eipPair(res, eipRow("ADD", "IPv4", b.defaultTraffic()), "external-ip", n0, "external-ip", 1, false, b.defaultTraffic())
	if err := group(b, res, n0); err != nil {
		return err
	}
	b.iterate(res)
	return b.report(res)
}
