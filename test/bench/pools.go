package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The pool rows: what the cluster's pools cost an ADD, against a real API
// server (etcd and kube-apiserver of test/e2e/kubernetes/build.sh, when its
// build is cached: building it takes 20 to 40 minutes, which a benchmark
// does not start) and the node process (external-ip-node) serving the
// node's socket, all in a node namespace of their own, as the e2e's
// single-node cluster runs them. The pods asking exist as API objects on
// that node; no kubelet runs them: the plugin is exec'd as the runtime
// would, with the pod's CNI_ARGS and annotation.
//
// Rows, each IPv4 with the default traffic, beside the empty node's
// explicit-IP row of the same run (today's path: no pools published, one
// missing file read):
//   - a pool ADD from an empty pool, and from a pool with 1,000 claims;
//   - an explicit-IP ADD while pools exist (the IP claimed for the pod's
//     namespace: the same round trip);
//   - with -pools-baseline REV, the explicit-IP ADD of REV's build (the
//     plugin before pools) on the empty node.
type poolBench struct {
	b          *bench
	n          *node
	k8s        string // the Kubernetes binaries
	dir        string // tokens, kubeconfig, etcd's data, logs
	kubeconfig string
	procs      []*exec.Cmd
	uids       map[string]string // pod name -> UID
}

const (
	poolNS   = "bench"
	poolNode = "bench-node"
	// The pools, IPv4, inside the bench's range4: the empty one, the one
	// with 1,000 claims (of a StatefulSet's ordinals, holding nothing: the
	// node's reconciliation leaves them), the one the explicit IPs lie in.
	poolEmpty, poolEmptyRange = "empty", "198.19.160.0/24"
	poolFull, poolFullRange   = "full", "198.19.168.0/21"
	poolNamed, poolNamedRange = "named", "198.19.176.0/22"
	poolFullClaims            = 1000
)

// Row names, also in poolComparisons.
func poolRow(verb, what string) string { return fmt.Sprintf("external-ip %s IPv4, %s", verb, what) }

var (
	rowPoolEmpty = poolRow("ADD", "pool (API server), empty pool")
	rowPoolFull  = poolRow("ADD", "pool (API server), 1000 claims")
	rowNamed     = poolRow("ADD", "explicit IP claimed while pools exist (API server)")
	rowBaseline  = poolRow("ADD", "explicit IP, build before pools")
)

// poolUnits adds the pool rows to res, when the Kubernetes build is
// cached; nil with a logged SKIP otherwise. The caller closes what it
// returns.
func poolUnits(b *bench, res *results, n0 *node) (*poolBench, error) {
	if err := baselineUnit(b, res, n0); err != nil {
		return nil, err
	}
	out, err := exec.Command(filepath.Join(b.root, "test/e2e/kubernetes/build.sh"), "--check").CombinedOutput()
	if err != nil {
		logf("SKIP the pool rows against an API server: no cached Kubernetes build (test/e2e/kubernetes/build.sh --check: %s)", strings.TrimSpace(string(out)))
		return nil, nil
	}
	pb := &poolBench{b: b, k8s: strings.TrimSpace(string(out)), dir: filepath.Join(b.tmp, "pools"), uids: map[string]string{}}
	b.atClose = append(b.atClose, pb.close)
	if err := pb.setup(); err != nil {
		return nil, fmt.Errorf("pool rows: %w", err)
	}
	k := 2_000_000
	pb.pair(res, rowPoolEmpty, "pe", k, func(string, int) map[string]any { return poolAnnotation(poolEmpty) })
	pb.pair(res, rowPoolFull, "pf", k+1, func(string, int) map[string]any { return poolAnnotation(poolFull) })
	pb.pair(res, rowNamed, "pn", k+2, func(_ string, i int) map[string]any {
		return map[string]any{"externalIPs": []string{addrPlus(strings.TrimSuffix(poolNamedRange, "/22"), i+1).String()}}
	})
	return pb, nil
}

func poolAnnotation(pool string) map[string]any {
	return map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"external-ip/pool": pool}}
}

// pair adds an ADD row and its DEL: iteration it runs as pod tag-i, a pod
// of its own, with the runtimeConfig rc gives.
func (pb *poolBench) pair(res *results, name, tag string, k int, rc func(pod string, i int) map[string]any) {
	a4, _ := containerAddrs(k)
	res.units = append(res.units, pb.b.pairUnit(res, name, "pools", pb.n, func(it int) call {
		i := it + pb.b.opts.warmup
		pod := fmt.Sprintf("%s-%d", tag, i)
		return pb.call(pod, k, rc(pod, i))
	}, a4))
}

// call is the ADD of pod's sandbox: the runtime's CNI_ARGS name the pod,
// and rc is the runtimeConfig (the pod's annotations, or explicit IPs).
func (pb *poolBench) call(pod string, k int, rc map[string]any) call {
	b := pb.b
	c := b.eipCall(b.bins["external-ip"], "ADD", pb.n, k, b.defaultTraffic())
	var conf map[string]any
	json.Unmarshal(c.stdin, &conf)
	conf["runtimeConfig"] = rc
	c.stdin, _ = json.Marshal(conf)
	c.containerID = "sandbox-" + pod
	c.env = []string{fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", poolNS, pod, pb.uids[pod])}
	return c
}

// setup: the node, the API server, our CRDs and the objects, the node
// process; then one pool ADD and its DEL checked.
func (pb *poolBench) setup() error {
	var err error
	if pb.n, err = pb.b.newNode("pk"); err != nil {
		return err
	}
	for _, step := range []func() error{pb.buildNode, pb.startAPI, pb.objects, pb.startNode, pb.sanity} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// buildNode builds external-ip-node as make build does.
func (pb *poolBench) buildNode() error {
	logf("building external-ip-node (tags metrics,kubernetes)")
	built := filepath.Join(pb.b.tmp, "built", "external-ip-node")
	cmd := exec.Command("go", "build", "-tags", "metrics,kubernetes", "-o", built, "./plugins/external-ip")
	cmd.Dir, cmd.Env = pb.b.root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building external-ip-node: %v\n%s", err, out)
	}
	pb.b.bins["external-ip-node"] = built
	return nil
}

// start runs args in the node's namespace, its own process group, output
// in dir/name.log; close stops it.
func (pb *poolBench) start(name string, args ...string) error {
	f, err := os.Create(filepath.Join(pb.dir, name+".log"))
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + pb.n.name}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	pb.procs = append(pb.procs, cmd)
	go cmd.Wait()
	return nil
}

func (pb *poolBench) close() {
	for _, c := range slices.Backward(pb.procs) {
		syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range pb.procs {
		for syscall.Kill(c.Process.Pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
}

// kubectl runs the cached kubectl as the cluster's admin, in the node's
// namespace, with stdin when given.
func (pb *poolBench) kubectl(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + pb.n.name,
		filepath.Join(pb.k8s, "kubectl"), "--kubeconfig=" + pb.kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// waitFor polls ok every 100 ms for up to limit.
func waitFor(limit time.Duration, what string, ok func() bool) error {
	for end := time.Now().Add(limit); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			return fmt.Errorf("timed out after %v waiting for %s", limit, what)
		}
	}
	return nil
}
