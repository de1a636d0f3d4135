package main

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The pool rows' cluster (pools.go): its API server, objects and node
// process.

// startAPI starts etcd and kube-apiserver in the node's namespace, the API
// server on the node's uplink address, one token: the cluster's admin.
func (pb *poolBench) startAPI() error {
	if err := os.MkdirAll(pb.dir, 0o700); err != nil {
		return err
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	if err := os.WriteFile(filepath.Join(pb.dir, "tokens.csv"), []byte(token+`,bench-admin,bench-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	if err := pb.serviceAccountKeys(); err != nil {
		return err
	}
	addr := strings.TrimSuffix(nodeV4, "/24")
	pb.kubeconfig = filepath.Join(pb.dir, "admin.kubeconfig")
	kc := fmt.Sprintf(`{"apiVersion": "v1", "kind": "Config", "current-context": "b",
  "clusters": [{"name": "b", "cluster": {"server": "https://%s:6443", "insecure-skip-tls-verify": true}}],
  "users": [{"name": "b", "user": {"token": %q}}], "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}]}`, addr, token)
	if err := os.WriteFile(pb.kubeconfig, []byte(kc), 0o600); err != nil {
		return err
	}
	logf("starting etcd and kube-apiserver (%s) in %s", pb.k8s, pb.n.name)
	local := "http://127.0.0.1:"
	if err := pb.start("etcd", filepath.Join(pb.k8s, "etcd"), "--name=bench", "--data-dir="+filepath.Join(pb.dir, "etcd"), "--unsafe-no-fsync",
		"--listen-client-urls="+local+"2379", "--advertise-client-urls="+local+"2379", "--listen-peer-urls="+local+"2380",
		"--initial-advertise-peer-urls="+local+"2380", "--initial-cluster=bench="+local+"2380", "--listen-metrics-urls="); err != nil {
		return err
	}
	if err := pb.start("kube-apiserver", filepath.Join(pb.k8s, "kube-apiserver"), "--etcd-servers="+local+"2379",
		"--advertise-address="+addr, "--secure-port=6443", "--cert-dir="+filepath.Join(pb.dir, "apiserver"),
		"--token-auth-file="+filepath.Join(pb.dir, "tokens.csv"), "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(pb.dir, "sa.pub"), "--service-account-signing-key-file="+filepath.Join(pb.dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/24", "--profiling=false", "--v=1"); err != nil {
		return err
	}
	return waitFor(180*time.Second, "kube-apiserver ready (its log: "+filepath.Join(pb.dir, "kube-apiserver.log")+")", func() bool {
		_, err := pb.kubectl(nil, "get", "--raw", "/readyz")
		return err == nil
	})
}

// serviceAccountKeys writes the key pair kube-apiserver requires.
func (pb *poolBench) serviceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(pb.dir, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(pb.dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// create makes the objects with one kubectl create (a List).
func (pb *poolBench) create(items []any) error {
	list, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	_, err := pb.kubectl(list, "create", "-f", "-")
	return err
}

// objects: our CRDs; the namespaces, the node, the pools; the 1,000 claims
// of a StatefulSet; a pod on the node per row and iteration.
func (pb *poolBench) objects() error {
	deploy := filepath.Join(pb.b.root, "deploy", "kubernetes")
	if _, err := pb.kubectl(nil, "apply", "-f", filepath.Join(deploy, "external-ip.io_externalippools.yaml"), "-f", filepath.Join(deploy, "external-ip.io_externalipclaims.yaml")); err != nil {
		return err
	}
	if _, err := pb.kubectl(nil, "wait", "--for=condition=Established", "crd/externalippools.external-ip.io", "crd/externalipclaims.external-ip.io", "--timeout=60s"); err != nil {
		return err
	}
	items := []any{obj("v1", "Namespace", "", "external-ip", nil), obj("v1", "Namespace", "", poolNS, nil),
		obj("v1", "ServiceAccount", poolNS, "default", nil), obj("v1", "Node", "", poolNode, nil),
		obj("apps/v1", "StatefulSet", poolNS, "filler", map[string]any{"replicas": poolFullClaims, "serviceName": "filler",
			"selector": map[string]any{"matchLabels": map[string]string{"app": "filler"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "filler"}}, "spec": podSpec("")}})}
	for _, p := range [][2]string{{poolEmpty, poolEmptyRange}, {poolFull, poolFullRange}, {poolNamed, poolNamedRange}} {
		items = append(items, obj("external-ip.io/v1alpha1", "ExternalIPPool", "", p[0], map[string]any{"ranges": []string{p[1]}, "namespaceSelector": map[string]any{}}))
	}
	if err := pb.create(items); err != nil {
		return err
	}
	if err := pb.fillerClaims(); err != nil {
		return err
	}
	return pb.pods()
}

func obj(apiVersion, kind, namespace, name string, spec map[string]any) map[string]any {
	o := map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}}
	if namespace != "" {
		o["metadata"].(map[string]any)["namespace"] = namespace
	}
	if spec != nil {
		o["spec"] = spec
	}
	return o
}

func podSpec(node string) map[string]any {
	s := map[string]any{"automountServiceAccountToken": false, "containers": []any{map[string]any{"name": "c", "image": "none"}}}
	if node != "" {
		s["nodeName"] = node
	}
	return s
}

// fillerClaims: pool full's 1,000 claims, of ordinals 0 to 999 of
// StatefulSet filler (which has no pods: no controller runs), holding
// nothing, as a StatefulSet's IPs wait for its next pods.
func (pb *poolBench) fillerClaims() error {
	uid, err := pb.kubectl(nil, "-n", poolNS, "get", "statefulset", "filler", "-o", "jsonpath={.metadata.uid}")
	if err != nil {
		return err
	}
	logf("making %d claims of pool %s", poolFullClaims, poolFull)
	var items []any
	for i := range poolFullClaims {
		ip := addrPlus(strings.TrimSuffix(poolFullRange, "/21"), i+1).String()
		c := obj("external-ip.io/v1alpha1", "ExternalIPClaim", "", ip, map[string]any{"address": ip, "pool": poolFull,
			"owner": map[string]any{"namespace": poolNS, "statefulSet": map[string]any{"name": "filler", "uid": string(uid), "ordinal": i}}})
		c["metadata"].(map[string]any)["labels"] = map[string]string{"external-ip.io/pool": poolFull, "external-ip.io/namespace": poolNS}
		items = append(items, c)
	}
	return pb.create(items)
}

// pods: a pod on the node for each row's iterations and the sanity check,
// and their UIDs.
func (pb *poolBench) pods() error {
	names := []string{"sanity-0"}
	for _, tag := range []string{"pe", "pf", "pn"} {
		for i := range pb.b.opts.warmup + pb.b.opts.n {
			names = append(names, fmt.Sprintf("%s-%d", tag, i))
		}
	}
	logf("making %d pods on node %s", len(names), poolNode)
	var items []any
	for _, name := range names {
		items = append(items, obj("v1", "Pod", poolNS, name, podSpec(poolNode)))
	}
	if err := pb.create(items); err != nil {
		return err
	}
	out, err := pb.kubectl(nil, "-n", poolNS, "get", "pods", "-o", "json")
	if err != nil {
		return err
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name, UID string }
		}
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return err
	}
	for _, p := range list.Items {
		pb.uids[p.Metadata.Name] = p.Metadata.UID
	}
	if len(pb.uids) != len(names) {
		return fmt.Errorf("made %d pods, the API server lists %d", len(names), len(pb.uids))
	}
	return nil
}

// startNode starts external-ip-node serving the node's socket as node
// bench-node (with its installer on a scratch conf dir, as the DaemonSet
// runs it), and waits until it has published the three pools.
func (pb *poolBench) startNode() error {
	conf, bin := filepath.Join(pb.dir, "conf"), filepath.Join(pb.dir, "bin")
	for _, d := range []string{conf, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	primary := `{"cniVersion": "1.0.0", "name": "k8s", "plugins": [{"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}}]}`
	entry, _ := json.Marshal(map[string]any{"type": "external-ip", "allowedRanges": []string{range4, range6}, "dataDir": pb.n.dataDir})
	pluginConf := filepath.Join(pb.dir, "plugin.json")
	if err := os.WriteFile(filepath.Join(conf, "10-k8s.conflist"), []byte(primary), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(pluginConf, entry, 0o644); err != nil {
		return err
	}
	if err := pb.start("external-ip-node", pb.b.bins["external-ip-node"], "install", "--watch", "--plugin-config="+pluginConf,
		"--plugin-binary="+pb.b.bins["external-ip"], "--bin-dir="+bin, "--conf-dir="+conf, "--data-dir="+pb.n.dataDir,
		"--node-name="+poolNode, "--kubeconfig="+pb.kubeconfig, "--namespace=external-ip"); err != nil {
		return err
	}
	logPath := filepath.Join(pb.dir, "external-ip-node.log")
	return waitFor(120*time.Second, "external-ip-node's caches synced and pools empty, full and named published (its log: "+logPath+")", func() bool {
		b, err := os.ReadFile(filepath.Join(pb.n.dataDir, "claims", "pools"))
		var p struct{ Pools []string }
		l, _ := os.ReadFile(logPath)
		return err == nil && json.Unmarshal(b, &p) == nil && len(p.Pools) == 3 && bytes.Contains(l, []byte(`"claims: caches synced"`))
	})
}

// sanity checks once, outside the figures, that a pool ADD holds an IP of
// the pool with its claim in the API, and its DEL takes both away.
func (pb *poolBench) sanity() error {
	prefix := strings.TrimSuffix(poolEmptyRange, "0/24")
	kubectl := []string{filepath.Join(pb.k8s, "kubectl"), "--kubeconfig=" + pb.kubeconfig, "get", "externalipclaims", "-l", "external-ip.io/pool=" + poolEmpty, "-o", "name"}
	out, err := pb.b.checkPair(pb.n, pb.call("sanity-0", 2_000_009, poolAnnotation(poolEmpty)),
		[][]string{{"ip", "route", "show", "dev", "eip0"}, kubectl}, []string{prefix, "externalipclaim.external-ip.io/" + prefix})
	if err != nil {
		return fmt.Errorf("sanity: %w", err)
	}
	logf("sanity: a pool ADD held %s with its claim; its DEL took both away", strings.Fields(out[0])[0])
	return nil
}

// baselineUnit adds the explicit-IP row of the plugin built from
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

// poolComparisons are the pool rows' goals.
func poolComparisons(b *bench) []comparison {
	today := eipRow("ADD", "IPv4", b.defaultTraffic())
	return []comparison{
		{ours: rowPoolEmpty, ref: today, diff: true, goal: "<= +5 ms"},
		{ours: rowPoolFull, ref: rowPoolEmpty, diff: true, goal: "<= +1 ms"},
		{ours: rowNamed, ref: today, diff: true},
		{ours: today, ref: rowBaseline, diff: true, goal: "within the run's noise"},
	}
}

// runPoolsOnly is -pools-only: the exec floor, host-local, the empty
// node's explicit-IP row and the pool rows.
func runPoolsOnly(b *bench) error {
	res, n0, err := emptyNode(b)
	if err != nil {
		return err
	}
	// referenceUnits' first two units are the floor and host-local; portmap's
	// (a second per iteration on a loaded machine) are left out.
	ref := &results{byName: map[string]*series{}}
	b.referenceUnits(ref, n0)
	for _, s := range ref.rows {
		if !strings.HasPrefix(s.name, "portmap") {
			res.rows, res.byName[s.name] = append(res.rows, s), s
		}
	}
	res.units = append(res.units, ref.units[:2]...)
	b.eipPair(res, eipRow("ADD", "IPv4", b.defaultTraffic()), "external-ip", n0, "external-ip", 1, false, b.defaultTraffic())
	if _, err := poolUnits(b, res, n0); err != nil {
		return err
	}
	b.iterate(res)
	return b.report(res)
}
