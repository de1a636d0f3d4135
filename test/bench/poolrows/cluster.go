package poolrows

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The pool rows' cluster: its API server, objects and node process.

// startAPI starts etcd and kube-apiserver in the node's namespace, the API
// server on the node's uplink address, one token: the cluster's admin.
func (r *Rows) startAPI() error {
	if err := os.MkdirAll(r.cfg.Dir, 0o700); err != nil {
		return err
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	if err := os.WriteFile(filepath.Join(r.cfg.Dir, "tokens.csv"), []byte(token+`,bench-admin,bench-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	if err := r.serviceAccountKeys(); err != nil {
		return err
	}
	addr := r.cfg.Addr
	r.kubeconfig = filepath.Join(r.cfg.Dir, "admin.kubeconfig")
	kc := fmt.Sprintf(`{"apiVersion": "v1", "kind": "Config", "current-context": "b",
  "clusters": [{"name": "b", "cluster": {"server": "https://%s:6443", "insecure-skip-tls-verify": true}}],
  "users": [{"name": "b", "user": {"token": %q}}], "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}]}`, addr, token)
	if err := os.WriteFile(r.kubeconfig, []byte(kc), 0o600); err != nil {
		return err
	}
	r.b.Logf("starting etcd and kube-apiserver (%s) in %s", r.cfg.K8s, r.n.NetNS())
	local := "http://127.0.0.1:"
	if err := r.start("etcd", filepath.Join(r.cfg.K8s, "etcd"), "--name=bench", "--data-dir="+filepath.Join(r.cfg.Dir, "etcd"), "--unsafe-no-fsync",
		"--listen-client-urls="+local+"2379", "--advertise-client-urls="+local+"2379", "--listen-peer-urls="+local+"2380",
		"--initial-advertise-peer-urls="+local+"2380", "--initial-cluster=bench="+local+"2380", "--listen-metrics-urls="); err != nil {
		return err
	}
	if err := r.start("kube-apiserver", filepath.Join(r.cfg.K8s, "kube-apiserver"), "--etcd-servers="+local+"2379",
		"--advertise-address="+addr, "--secure-port=6443", "--cert-dir="+filepath.Join(r.cfg.Dir, "apiserver"),
		"--token-auth-file="+filepath.Join(r.cfg.Dir, "tokens.csv"), "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+filepath.Join(r.cfg.Dir, "sa.pub"), "--service-account-signing-key-file="+filepath.Join(r.cfg.Dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/24", "--profiling=false", "--v=1"); err != nil {
		return err
	}
	return waitFor(180*time.Second, "kube-apiserver ready (its log: "+filepath.Join(r.cfg.Dir, "kube-apiserver.log")+")", func() bool {
		_, err := r.kubectl(nil, "get", "--raw", "/readyz")
		return err == nil
	})
}

// serviceAccountKeys writes the key pair kube-apiserver requires.
func (r *Rows) serviceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(filepath.Join(r.cfg.Dir, "sa.key"), priv, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.cfg.Dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// create makes the objects with one kubectl create (a List).
func (r *Rows) create(items []any) error {
	list, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	_, err := r.kubectl(list, "create", "-f", "-")
	return err
}

// objects: our CRDs; the namespaces, the node, the pools; the 1,000 claims
// of a StatefulSet; a pod on the node per row and iteration.
func (r *Rows) objects() error {
	deploy := filepath.Join(r.cfg.Root, "deploy", "kubernetes")
	if _, err := r.kubectl(nil, "apply", "-f", filepath.Join(deploy, "external-ip.io_externalippools.yaml"), "-f", filepath.Join(deploy, "external-ip.io_externalipclaims.yaml")); err != nil {
		return err
	}
	if _, err := r.kubectl(nil, "wait", "--for=condition=Established", "crd/externalippools.external-ip.io", "crd/externalipclaims.external-ip.io", "--timeout=60s"); err != nil {
		return err
	}
	items := []any{obj("v1", "Namespace", "", "external-ip", nil), obj("v1", "Namespace", "", poolNS, nil),
		obj("v1", "ServiceAccount", poolNS, "default", nil), obj("v1", "Node", "", poolNode, nil),
		obj("apps/v1", "StatefulSet", poolNS, "filler", map[string]any{"replicas": poolFullClaims, "serviceName": "filler",
			"selector": map[string]any{"matchLabels": map[string]string{"app": "filler"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{"app": "filler"}}, "spec": podSpec("")}})}
	for _, p := range [][]string{{poolEmpty, poolEmptyRange}, {poolFull, poolFullRange}, {poolNamed, poolNamedRange}, {poolDual, poolDualRange4, poolDualRange6}, {poolSched, poolSchedRange}} {
		items = append(items, obj("external-ip.io/v1alpha1", "ExternalIPPool", "", p[0], map[string]any{"ranges": p[1:], "namespaceSelector": map[string]any{}}))
	}
	if err := r.create(items); err != nil {
		return err
	}
	if err := r.fillerClaims(); err != nil {
		return err
	}
	return r.pods()
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
func (r *Rows) fillerClaims() error {
	uid, err := r.kubectl(nil, "-n", poolNS, "get", "statefulset", "filler", "-o", "jsonpath={.metadata.uid}")
	if err != nil {
		return err
	}
	r.b.Logf("making %d claims of pool %s", poolFullClaims, poolFull)
	var items []any
	for i := range poolFullClaims {
		ip := nth(poolFullRange, i+1)
		c := obj("external-ip.io/v1alpha1", "ExternalIPClaim", "", ip, map[string]any{"address": ip, "pool": poolFull,
			"owner": map[string]any{"namespace": poolNS, "statefulSet": map[string]any{"name": "filler", "uid": string(uid), "ordinal": i}}})
		c["metadata"].(map[string]any)["labels"] = map[string]string{"external-ip.io/pool": poolFull, "external-ip.io/namespace": poolNS}
		items = append(items, c)
	}
	return r.create(items)
}

// pods: a pod on the node for each row's iterations and the sanity check,
// and their UIDs.
func (r *Rows) pods() error {
	names := []string{"sanity-0"}
	for _, tag := range []string{"pe", "pf", "pn", "pd", "ps"} {
		for i := range r.cfg.Warmup + r.cfg.N {
			names = append(names, fmt.Sprintf("%s-%d", tag, i))
		}
	}
	r.b.Logf("making %d pods on node %s", len(names), poolNode)
	var items []any
	for _, name := range names {
		pod := obj("v1", "Pod", poolNS, name, podSpec(poolNode))
		if strings.HasPrefix(name, "ps-") {
			pod["metadata"].(map[string]any)["annotations"] = map[string]string{"external-ip/pool": poolSched}
		}
		items = append(items, pod)
	}
	if err := r.create(items); err != nil {
		return err
	}
	out, err := r.kubectl(nil, "-n", poolNS, "get", "pods", "-o", "json")
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
		r.uids[p.Metadata.Name] = p.Metadata.UID
	}
	if len(r.uids) != len(names) {
		return fmt.Errorf("made %d pods, the API server lists %d", len(names), len(r.uids))
	}
	return nil
}

// startNode starts external-ip-node serving the node's socket as node
// bench-node (with its installer on a scratch conf dir, as the DaemonSet
// runs it), and waits until it has published the four pools.
func (r *Rows) startNode() error {
	conf, bin := filepath.Join(r.cfg.Dir, "conf"), filepath.Join(r.cfg.Dir, "bin")
	for _, d := range []string{conf, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	primary := `{"cniVersion": "1.0.0", "name": "k8s", "plugins": [{"type": "bridge", "bridge": "cni0", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}}]}`
	entry, _ := json.Marshal(map[string]any{"type": "external-ip", "allowedRanges": r.cfg.Ranges, "dataDir": r.n.DataDir()})
	pluginConf := filepath.Join(r.cfg.Dir, "plugin.json")
	if err := os.WriteFile(filepath.Join(conf, "10-k8s.conflist"), []byte(primary), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(pluginConf, entry, 0o644); err != nil {
		return err
	}
	if err := r.start("external-ip-node", r.cfg.Built, "install", "--watch", "--plugin-config="+pluginConf,
		"--plugin-binary="+r.cfg.Plugin, "--bin-dir="+bin, "--conf-dir="+conf, "--data-dir="+r.n.DataDir(),
		"--node-name="+poolNode, "--kubeconfig="+r.kubeconfig, "--namespace=external-ip"); err != nil {
		return err
	}
	logPath := filepath.Join(r.cfg.Dir, "external-ip-node.log")
	return waitFor(120*time.Second, "external-ip-node's caches synced and pools empty, full, named, dual and sched published (its log: "+logPath+")", func() bool {
		b, err := os.ReadFile(filepath.Join(r.n.DataDir(), "claims", "pools"))
		var p struct{ Pools []string }
		l, _ := os.ReadFile(logPath)
		return err == nil && json.Unmarshal(b, &p) == nil && len(p.Pools) == 5 && bytes.Contains(l, []byte(`"claims: caches synced"`))
	})
}

// scheduledClaimed waits until the node process has claimed for every pod
// of the scheduled row, as it does for a pod scheduled to its node long
// before the pod's ADD: the row times what such an ADD costs.
func (r *Rows) scheduledClaimed() error {
	want := r.cfg.Warmup + r.cfg.N
	return waitFor(120*time.Second, fmt.Sprintf("the %d claims of the pods scheduled asking pool %s", want, poolSched), func() bool {
		out, err := r.kubectl(nil, "get", "externalipclaims", "-l", "external-ip.io/pool="+poolSched, "-o", "name")
		return err == nil && bytes.Count(out, []byte("\n")) == want
	})
}

// sanity checks once, outside the figures, that a pool ADD holds an IP of
// the pool with its claim in the API, and its DEL takes both away.
func (r *Rows) sanity() error {
	prefix := strings.TrimSuffix(poolEmptyRange, "0/24")
	kubectl := []string{filepath.Join(r.cfg.K8s, "kubectl"), "--kubeconfig=" + r.kubeconfig, "get", "externalipclaims", "-l", "external-ip.io/pool=" + poolEmpty, "-o", "name"}
	out, err := r.b.Check(r.n, 2_000_009, r.call("sanity-0", poolAnnotation(poolEmpty)),
		[][]string{{"ip", "route", "show", "dev", "eip0"}, kubectl}, []string{prefix, "externalipclaim.external-ip.io/" + prefix})
	if err != nil {
		return fmt.Errorf("sanity: %w", err)
	}
	r.b.Logf("sanity: a pool ADD held %s with its claim; its DEL took both away", strings.Fields(out[0])[0])
	return nil
}

// baselineUnit adds the explicit-IP row of the plugin built from
// -pools-baseline (the plugin before pools) on the empty node, when the

// nth is the i-th address of an IPv4 prefix.
func nth(prefix string, i int) string {
	a := netip.MustParsePrefix(prefix).Addr().As4()
	binary.BigEndian.PutUint32(a[:], binary.BigEndian.Uint32(a[:])+uint32(i))
	return netip.AddrFrom4(a).String()
}
