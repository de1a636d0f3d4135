package poolrows

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Bench is what the pool rows need of the bench that runs them.
type Bench interface {
	// NewNode makes a node: a network namespace with an uplink to a LAN,
	// the uplink's address Config.Addr, and the plugin's state directory.
	NewNode(tag string) (Node, error)
	// Pair adds an ADD row named row and its DEL row to the bench's
	// iterations: attachment k's ADD of the plugin on n, as the bench
	// makes it with its default traffic, changed by call(it), then the
	// same call as DEL.
	Pair(row string, n Node, k int, call func(it int) Call)
	// Check runs attachment k's ADD, changed by c, and then its DEL,
	// outside the figures; the dump commands (run in n) must print every
	// want after the ADD and none after the DEL. It returns what they
	// printed after the ADD.
	Check(n Node, k int, c Call, dumps [][]string, want []string) ([]string, error)
	// Logf prints progress.
	Logf(format string, args ...any)
}

// Node is a node namespace of the bench.
type Node interface {
	NetNS() string   // its name under /var/run/netns
	DataDir() string // the plugin's state directory
}

// Call is what a pool row changes in the bench's ADD of the plugin: the
// runtimeConfig (the pod's annotations, or explicit IPs), the sandbox, and
// the runtime's CNI_ARGS naming the pod; Conf, keys of the network config
// set beside the bench's own (the node-local pools).
type Call struct {
	Conf          map[string]any
	RuntimeConfig map[string]any
	ContainerID   string
	Env           []string
}

// Config is where the pool rows run.
type Config struct {
	Root   string   // the repository: deploy/kubernetes and the node process's source
	Dir    string   // scratch: tokens, kubeconfig, etcd's data, logs
	K8s    string   // the cached Kubernetes binaries
	Built  string   // where external-ip-node is built
	Plugin string   // the external-ip binary the node process installs
	Addr   string   // the node's uplink IPv4, where the API server listens
	Ranges []string // the plugin's allowedRanges
	// The bench's iterations: each row has a pod of its own for each.
	Warmup, N int
}

// Rows are the pool rows' cluster. Rows, each IPv4 with the bench's
// default traffic:
//   - a pool ADD from an empty pool, and from a pool with 1,000 claims;
//   - an explicit-IP ADD while pools exist (the IP claimed for the pod's
//     namespace: the same round trip);
//   - a pool ADD from a dual-stack pool (an IPv4 and an IPv6 claim);
//   - a pool ADD of a pod whose object asks the pool, claimed for when
//     the node process saw it scheduled (the other rows' pods do not ask
//     in their objects: their ADDs make the claims).
type Rows struct {
	cfg        Config
	b          Bench
	n          Node
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
	poolDual, poolDualRange6  = "dual", "2001:db8:1::d:0/112"
	poolDualRange4            = "198.19.164.0/24"
	poolSched, poolSchedRange = "sched", "198.19.165.0/24"
	poolFullClaims            = 1000
)

// Row names a pool row as the bench names its own.
func Row(what string) string { return fmt.Sprintf("external-ip ADD IPv4, %s", what) }

// The rows' names, for the bench's comparisons.
var (
	RowPoolEmpty = Row("pool (API server), empty pool")
	RowPoolFull  = Row("pool (API server), 1000 claims")
	RowNamed     = Row("explicit IP claimed while pools exist (API server)")
	RowPoolDual  = Row("pool (API server), dual-stack pool")
	// RowPoolScheduled is a pool ADD as on Kubernetes: the pod object
	// asks the pool by its annotation, and was scheduled to the node well
	// before its ADD, so the node process claimed for it then.
	RowPoolScheduled = Row("pool (API server), claimed when the pod was scheduled")
)

// Goal is one comparison of a pool row with another: the difference of
// their p50s, or (Paired) their difference paired by iteration, with the
// CPU time's.
type Goal struct {
	Ours, Ref string
	Paired    bool
	Goal      string
}

// Goals are the pool rows' comparisons: today is the bench's explicit-IP
// ADD row, before the same ADD of the build before pools.
func Goals(today, before string) []Goal {
	return []Goal{
		{Ours: RowPoolScheduled, Ref: today, Goal: "<= +5 ms"},
		{Ours: RowPoolEmpty, Ref: today},
		{Ours: RowPoolFull, Ref: RowPoolEmpty, Goal: "<= +1 ms"},
		{Ours: RowNamed, Ref: today},
		{Ours: RowPoolDual, Ref: RowPoolEmpty},
		{Ours: RowLocalPool, Ref: today, Goal: "within the run's noise"},
		{Ours: RowNamedLocal, Ref: today, Goal: "within the run's noise"},
		// Paired by iteration (each ran once in each, shuffled): the
		// difference with its interval, which the p50s' gap lacks.
		{Ours: RowPoolScheduled, Ref: today, Paired: true},
		{Ours: RowPoolFull, Ref: RowPoolEmpty, Paired: true},
		{Ours: RowPoolEmpty, Ref: today, Paired: true},
		{Ours: RowLocalPool, Ref: today, Paired: true},
		{Ours: RowNamedLocal, Ref: today, Paired: true},
		{Ours: today, Ref: before, Goal: "within the run's noise"},
		{Ours: today, Ref: before, Paired: true},
	}
}

// New is the pool rows of cfg; Start starts them, Close stops what
// Start started, whether or not it failed.
func New(cfg Config) *Rows { return &Rows{cfg: cfg, uids: map[string]string{}} }

// Start makes the cluster on a node of b's and adds the rows to b.
func (r *Rows) Start(b Bench) error {
	r.b = b
	if err := r.setup(); err != nil {
		return err
	}
	k := 2_000_000
	r.pair(RowPoolEmpty, "pe", k, func(int) map[string]any { return poolAnnotation(poolEmpty) })
	r.pair(RowPoolFull, "pf", k+1, func(int) map[string]any { return poolAnnotation(poolFull) })
	r.pair(RowNamed, "pn", k+2, func(i int) map[string]any {
		return map[string]any{"externalIPs": []string{nth(poolNamedRange, i+1)}}
	})
	r.pair(RowPoolDual, "pd", k+3, func(int) map[string]any { return poolAnnotation(poolDual) })
	r.pair(RowPoolScheduled, "ps", k+4, func(int) map[string]any { return poolAnnotation(poolSched) })
	return nil
}

func poolAnnotation(pool string) map[string]any {
	return map[string]any{"io.kubernetes.cri.pod-annotations": map[string]string{"external-ip/pool": pool}}
}

// pair adds an ADD row and its DEL: iteration it runs as pod tag-i, a pod
// of its own, with the runtimeConfig rc gives.
func (r *Rows) pair(name, tag string, k int, rc func(i int) map[string]any) {
	r.b.Pair(name, r.n, k, func(it int) Call {
		i := it + r.cfg.Warmup
		return r.call(fmt.Sprintf("%s-%d", tag, i), rc(i))
	})
}

// call is the ADD of pod's sandbox: the runtime's CNI_ARGS name the pod,
// and rc is the runtimeConfig.
func (r *Rows) call(pod string, rc map[string]any) Call {
	return Call{RuntimeConfig: rc, ContainerID: "sandbox-" + pod,
		Env: []string{fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", poolNS, pod, r.uids[pod])}}
}

// setup: the node, the API server, our CRDs and the objects, the node
// process; then one pool ADD and its DEL checked.
func (r *Rows) setup() error {
	var err error
	if r.n, err = r.b.NewNode("pk"); err != nil {
		return err
	}
	for _, step := range []func() error{r.buildNode, r.startAPI, r.objects, r.startNode, r.scheduledClaimed, r.sanity} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// buildNode builds external-ip-node as make build does.
func (r *Rows) buildNode() error {
	r.b.Logf("building external-ip-node (tags metrics,kubernetes)")
	cmd := exec.Command("go", "build", "-tags", "metrics,kubernetes", "-o", r.cfg.Built, "./plugins/external-ip")
	cmd.Dir, cmd.Env = r.cfg.Root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building external-ip-node: %v\n%s", err, out)
	}
	return nil
}

// start runs args in the node's namespace, its own process group, output
// in Dir/name.log; Close stops it.
func (r *Rows) start(name string, args ...string) error {
	f, err := os.Create(filepath.Join(r.cfg.Dir, name+".log"))
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + r.n.NetNS()}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	r.procs = append(r.procs, cmd)
	go cmd.Wait()
	return nil
}

// Close stops the cluster's processes, the last started first.
func (r *Rows) Close() {
	for _, c := range slices.Backward(r.procs) {
		syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range r.procs {
		for syscall.Kill(c.Process.Pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
}

// kubectl runs the cached kubectl as the cluster's admin, in the node's
// namespace, with stdin when given.
func (r *Rows) kubectl(stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + r.n.NetNS(),
		filepath.Join(r.cfg.K8s, "kubectl"), "--kubeconfig=" + r.kubeconfig}, args...)...)
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
