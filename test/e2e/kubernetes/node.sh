# shellcheck shell=bash
# The single-node cluster of test/e2e/kubernetes.sh and its checks. Source it
# after lib.sh and after kubernetes.sh has set T, K8S, NODE, BIN, CONF, DATA,
# PRIMARY, NODE_NAME, API, RANGES. Everything it starts runs in the "host"
# netns, with its state under $T.

# The sysctls kubelet sets at start unless they hold its values
# (pkg/kubelet/cm setupKernelTunables). They are machine-wide, not per
# netns: kubelet runs with a file of our own bind-mounted over each, in the
# recipe's private mount namespace, so its writes land in those files.
K8S_SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops
             kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

# k8s_umount_under DIR: every mount below DIR, deepest first (what kubelet
# or containerd left), so that the temp dir can go. Run at exit, after they
# stopped.
k8s_umount_under() {
  awk -v d="$1/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l || true
}
export -f k8s_umount_under

# k8s_mask_sysctls: the masks, each starting with the machine's value, and
# a second procfs at $T/realproc that shows the kernel's values.
k8s_mask_sysctls() {
  local s f
  mkdir -p "$T/sysctl" "$T/realproc"
  mount -t proc proc "$T/realproc"
  e2e_defer "umount $T/realproc"
  for s in "${K8S_SYSCTLS[@]}"; do
    f=$T/sysctl/${s//\//.}
    cat "/proc/sys/$s" >"$f"
    cp "$f" "$f.machine"
    mount --bind "$f" "/proc/sys/$s"
    e2e_defer "umount /proc/sys/$s"
  done
}

# k8s_check_sysctls: what kubelet wrote went to the masks; the machine's
# values are those from before the run.
k8s_check_sysctls() {
  local s f wrote=()
  for s in "${K8S_SYSCTLS[@]}"; do
    f=$T/sysctl/${s//\//.}
    cmp -s "$f" "$f.machine" || wrote+=("${s//\//.}=$(cat "$f")")
    expect_eq "the machine's ${s//\//.} is unchanged" "$(cat "$f.machine")" "$(cat "$T/realproc/sys/$s")"
  done
  log "kubelet wrote into the masks: ${wrote[*]:-nothing}"
  # The machine's values differ from kubelet's here (vm.overcommit_memory 0,
  # kernel.panic_on_oops 0): kubelet must have written, and only into the masks.
  if [ "$(cat "$T/sysctl/vm.overcommit_memory.machine")" != 1 ]; then
    expect_eq "kubelet set vm.overcommit_memory=1, in its mask only" 1 "$(cat "$T/sysctl/vm.overcommit_memory")"
  fi
}

# Where the components would write by default: none may appear on the
# machine (all are moved under $T). Checked from outside our mount
# namespace's bind mounts: there are none on these paths.
K8S_MACHINE_PATHS=(/etc/cni/net.d/10-containerd-net.conflist /opt/cni /run/cni /etc/kubernetes
                   /var/lib/kubelet /var/lib/etcd /var/run/kubernetes /usr/libexec/kubernetes
                   /var/lib/containerd /var/log/pods /var/log/containers)
k8s_machine_paths() { local p; for p in "${K8S_MACHINE_PATHS[@]}"; do [ ! -e "$p" ] || echo "$p"; done; }

# k8s_stop_kubelet: kubelet stopped, and the machine's /var/lib and /var/log
# visible again (to check that nothing of kubelet's went there).
k8s_stop_kubelet() {
  e2e_kill_pid "$KUBELET_PID" 10
  umount -l /var/lib
  umount -l /var/log
}

# k8s_snapshot DIR: every entry of DIR (hidden ones too) with its type, mode,
# owner and, for files, the SHA-256 of its bytes.
k8s_snapshot() {
  (cd "$1" && find . -mindepth 1 -printf '%p %y %m %U:%G\n' | sort && find . -type f -exec sha256sum {} + | sort)
}

# ------------------------------------------------------------------ images

# k8s_cgi DIR: DIR/cgi-bin/ip answers the client's address (REMOTE_ADDR).
k8s_cgi() {
  mkdir -p "$1/cgi-bin"
  printf '#!/bin/sh\nprintf "Content-Type: text/plain\\r\\n\\r\\n%%s\\n" "$REMOTE_ADDR"\n' >"$1/cgi-bin/ip"
  chmod 0755 "$1/cgi-bin/ip"
}

# k8s_images: $T/pause.oci.tar (busybox's sleep) and $T/server.oci.tar
# (busybox, with a CGI that answers the client's address), FROM scratch.
k8s_images() {
  e2e_rootfs "$T/rootfs"
  k8s_cgi "$T/rootfs/www"
  e2e_oci_archive "$T/rootfs" localhost/e2e/server:latest "$T/server.oci.tar"
  mkdir -p "$T/pause/bin"
  cp /bin/busybox "$T/pause/bin/busybox"
  ln -s busybox "$T/pause/bin/sleep"
  e2e_oci_archive "$T/pause" localhost/e2e/pause:latest "$T/pause.oci.tar"
}

# ----------------------------------------------------------- control plane

# k8s_daemon NAME CMD...: CMD in the host netns, its own session (a
# timeout's SIGTERM to our group must not stop it before the exit trap
# used it), log in $T/NAME.log, stopped at exit.
k8s_daemon() {
  local name=$1; shift
  # nsenter itself, not the hostns function: $! must be the daemon (nsenter
  # and setsid exec it), not a subshell, or the kill at exit misses it.
  nsenter --net="/run/netns/$E2E_HOST_NS" setsid "$@" >"$T/$name.log" 2>&1 &
  K8S_PID=$!
  e2e_defer "e2e_kill_pid $! 10"
  log "$name: pid $!"
}

k8s_token() { head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# k8s_kubeconfig NAME TOKEN: $T/kube/NAME.kubeconfig. The API server's
# certificate is its own self-signed one.
k8s_kubeconfig() {
  cat >"$T/kube/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$API", insecure-skip-tls-verify: true}}]
users: [{name: $1, user: {token: "$2"}}]
contexts: [{name: e2e, context: {cluster: e2e, user: $1}}]
current-context: e2e
EOF
}

# k8s_control_plane: etcd and the three control-plane components, token
# authentication (one token per component), RBAC and the Node authorizer;
# kubectl on PATH as the cluster's admin, in the host netns.
k8s_control_plane() {
  k8s_api
  k8s_controllers
}

# k8s_api: etcd and kube-apiserver alone (test/e2e/claims.sh needs no
# more), with kubectl on PATH as the cluster's admin. K8S_EXTRA_TOKENS, when
# set, are more lines of the token file ('token,user,uid,"groups"').
k8s_api() {
  local k=$T/kube admin node kcm sched
  openssl genrsa -out "$k/sa.key" 2048 2>/dev/null
  openssl rsa -in "$k/sa.key" -pubout -out "$k/sa.pub" 2>/dev/null
  admin=$(k8s_token) node=$(k8s_token) kcm=$(k8s_token) sched=$(k8s_token)
  cat >"$k/tokens.csv" <<EOF
$admin,e2e-admin,e2e-admin,"system:masters"
$node,system:node:$NODE_NAME,e2e-node,"system:nodes"
$kcm,system:kube-controller-manager,e2e-kcm
$sched,system:kube-scheduler,e2e-scheduler
${K8S_EXTRA_TOKENS:-}
EOF
  k8s_kubeconfig admin "$admin"
  k8s_kubeconfig node "$node"
  k8s_kubeconfig kcm "$kcm"
  k8s_kubeconfig scheduler "$sched"
  printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s %s/kubectl --kubeconfig=%s/admin.kubeconfig "$@"\n' \
    "$E2E_HOST_NS" "$K8S" "$k" >"$T/path/kubectl"
  chmod 0755 "$T/path/kubectl"
  export PATH="$T/path:$PATH" KUBECACHEDIR="$T/kube/cache"

  k8s_daemon etcd "$K8S/etcd" --name e2e --data-dir "$T/etcd" --unsafe-no-fsync \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster e2e=http://127.0.0.1:2380 --listen-metrics-urls ''
  k8s_apiserver
  pass "kube-apiserver is ready ($(kubectl version -o json | jq -r .serverVersion.gitVersion))"
}

# k8s_apiserver: kube-apiserver on the running etcd, once it is ready; its
# pid in K8S_APISERVER_PID (test/e2e/claims.sh stops and starts it again).
k8s_apiserver() {
  local k=$T/kube
  k8s_daemon kube-apiserver "$K8S/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --advertise-address="$E2E_HOST_V4" --secure-port=6443 --cert-dir="$k/apiserver" \
    --token-auth-file="$k/tokens.csv" --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$k/sa.pub" --service-account-signing-key-file="$k/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 --kubelet-preferred-address-types=InternalIP \
    --profiling=false --v=1
  K8S_APISERVER_PID=$K8S_PID
  e2e_wait_for 120 "kube-apiserver ready" kubectl get --raw /readyz
}

# k8s_controllers: kube-controller-manager and kube-scheduler.
k8s_controllers() {
  local k=$T/kube
  # --use-service-account-credentials: each controller acts as its own
  # ServiceAccount, which the bootstrap RBAC roles are bound to (the
  # DaemonSet controller cannot create pods as the manager itself).
  k8s_daemon kube-controller-manager "$K8S/kube-controller-manager" --kubeconfig="$k/kcm.kubeconfig" \
    --use-service-account-credentials --service-account-private-key-file="$k/sa.key" \
    --root-ca-file="$k/apiserver/apiserver.crt" --leader-elect=false --secure-port=0 \
    --flex-volume-plugin-dir="$T/kube/flex" \
    --profiling=false --v=1
  k8s_daemon kube-scheduler "$K8S/kube-scheduler" --kubeconfig="$k/scheduler.kubeconfig" \
    --leader-elect=false --secure-port=0 --profiling=false --v=1
}

# ---------------------------------------------------------------- kubelet

# k8s_kubelet: kubelet on the containerd of e2e_containerd_start, its pods'
# cgroups under $E2E_CGROUP_PARENT, its files under $T; waits for the node
# to be Ready and for the default ServiceAccount (pods are refused until the
# controller-manager made it).
k8s_kubelet() {
  local d cg=${E2E_CGROUP_PARENT#/}
  # kubelet refuses a cgroup root that does not exist.
  for d in /sys/fs/cgroup/*/; do
    mkdir -p "$d$cg"
    if [ -f "$d/cpuset.cpus" ]; then
      cat "$d/cpuset.cpus" >"$d$cg/cpuset.cpus"
      cat "$d/cpuset.mems" >"$d$cg/cpuset.mems"
    fi
  done
  # Paths fixed in kubelet: /var/log/containers (pod logs go to /var/log/pods
  # too) and /var/lib/kubelet/device-plugins, whatever --root-dir says. Both
  # /var/log and /var/lib are ours for the rest of the run (the private
  # /var/lib/cni of e2e_init included, now under $T/varlib).
  mkdir -p "$T/varlog" "$T/varlib/cni" "$T/varlib/containers/cache"
  mount --bind "$T/varlog" /var/log
  e2e_defer "umount -l /var/log || true"
  mount --bind "$T/varlib" /var/lib
  e2e_defer "umount -l /var/lib || true"
  cat >"$T/kube/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: $E2E_CGROUP_PARENT
failCgroupV1: false
containerRuntimeEndpoint: unix://$SOCK
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
resolvConf: ""
makeIPTablesUtilChains: false
protectKernelDefaults: false
failSwapOn: false
syncFrequency: 5s
evictionHard: {memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
volumePluginDir: $T/kube/flex
EOF
  k8s_daemon kubelet "$K8S/kubelet" --config="$T/kube/kubelet.yaml" --kubeconfig="$T/kube/node.kubeconfig" \
    --root-dir="$T/kubelet" --cert-dir="$T/kubelet/pki" --hostname-override="$NODE_NAME" --node-ip="$E2E_HOST_V4" --v=2
  KUBELET_PID=$K8S_PID
  e2e_wait_for 60 "node $NODE_NAME registered" kubectl get node "$NODE_NAME"
  check "node $NODE_NAME becomes Ready" kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s
  e2e_wait_for 60 "the default ServiceAccount" kubectl -n default get serviceaccount default
}

# -------------------------------------------------------------- manifests

# k8s_configmap RANGES [KEYS]: deploy/kubernetes/configmap.yaml with RANGES
# as allowedRanges and the node's dataDir, and KEYS (more members of the
# entry's JSON object, as '"standby": true') after them.
k8s_configmap() {
  sed "s#^\( *\)\"allowedRanges\": \[\],\$#\1\"allowedRanges\": $1, \"dataDir\": \"$DATA\",${2:+ $2,}#" \
    "$E2E_REPO/deploy/kubernetes/configmap.yaml"
}

# k8s_site_manifests: $T/site/deploy/kubernetes/, the shipped manifests with
# the node's paths (hostPath, and the state dir where the installer names
# it, since the plugin entry's dataDir is the node's path) and allowedRanges;
# and, with no kube-proxy here to route the kubernetes Service's IP, the
# API server's own address for the node process (KUBERNETES_SERVICE_HOST
# and _PORT, which a container's env sets before the kubelet's).
k8s_site_manifests() {
  local src=$E2E_REPO/deploy/kubernetes dst=$T/site/deploy/kubernetes n f
  for f in "$src"/*.yaml; do
    case $(basename "$f") in configmap.yaml|daemonset.yaml|podmonitor.yaml|prometheusrule.yaml) ;; *) cp "$f" "$dst/" ;; esac
  done
  k8s_configmap "$RANGES" >"$dst/configmap.yaml"
  sed -e "s#^\( *path: \)/opt/cni/bin\$#\1$BIN#" -e "s#^\( *path: \)/etc/cni/net.d\$#\1$CONF#" \
    -e "s#/run/cni/external-ip\$#$DATA#" \
    -e "s#^\( *\)env:\$#\1env:\n\1  - {name: KUBERNETES_SERVICE_HOST, value: \"$E2E_HOST_V4\"}\n\1  - {name: KUBERNETES_SERVICE_PORT, value: \"6443\"}#" \
    "$src/daemonset.yaml" >"$dst/daemonset.yaml"
  n=$(diff "$src/configmap.yaml" "$dst/configmap.yaml" | grep -c '^>' || true)
  [ "$n" = 1 ] || die "configmap.yaml: want 1 line changed (allowedRanges), got $n: update k8s_configmap"
  n=$(diff "$src/daemonset.yaml" "$dst/daemonset.yaml" | grep -c '^>' || true)
  [ "$n" = 7 ] || die "daemonset.yaml: want 7 lines changed (3 hostPaths, the state's mountPath, --data-dir, the API server's address), got $n: update k8s_site_manifests"
  diff "$src/daemonset.yaml" "$dst/daemonset.yaml" >&2 || true
}

ds_pods() { kubectl -n external-ip get pods -l app.kubernetes.io/name=external-ip -o json; }
# ds_ready: one installer pod, not terminating, Ready.
ds_ready() {
  ds_pods | jq -e '[.items[] | select(.metadata.deletionTimestamp == null)]
    | length == 1 and (.[0].status.conditions // [] | any(.type == "Ready" and .status == "True"))'
}
ds_uid() { ds_pods | jq -r '[.items[] | select(.metadata.deletionTimestamp == null)][0].metadata.uid'; }

# ------------------------------------------------------------ traffic

# k8s_lan_server: the LAN's own server on :8081, answering the client's
# address.
k8s_lan_server() {
  k8s_cgi "$T/lanwww"
  lanns busybox httpd -f -p 8081 -h "$T/lanwww" >"$T/lan-httpd.log" 2>&1 &
  e2e_defer "kill $!"
}

k8s_web_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  annotations:
    external-ip/addresses: "$V4,$V6"
spec:
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 2
  containers:
    - name: web
      image: localhost/e2e/server:latest
      imagePullPolicy: Never
      command: [/bin/httpd, -f, -p, "8080", -h, /www]
EOF
}

# Debian's static busybox wget crashes (getaddrinfo in static glibc); nc
# does not, so the clients speak HTTP/1.0 through it.
# k8s_http: a GET of the CGI on stdout, for busybox nc.
k8s_http() { printf 'GET /cgi-bin/ip HTTP/1.0\r\n\r\n'; }
# k8s_addr: the body of the answer, the client address that the server saw,
# without brackets or the IPv4-mapped prefix of a dual-stack socket.
k8s_addr() { tr -d '\r' | sed '1,/^$/d' | sed -n '1{s/^\[//; s/\]$//; s/^::ffff://; p}'; }
# lan_get IP: what the pod's server at IP:8080 says the LAN client's address is.
lan_get() { k8s_http | lanns busybox nc -w 5 "$1" 8080 | k8s_addr; }
# pod_get POD IP: what the LAN's server at IP:8081 says POD's address is.
pod_get() { kubectl exec "$1" -- sh -c "printf 'GET /cgi-bin/ip HTTP/1.0\r\n\r\n' | nc -w 5 $2 8081" | k8s_addr; }

# ------------------------------------------------------ rollout, configmap

# chained_now: the node's primary ends with our entry and the binary is there.
chained_now() {
  [ -x "$BIN/external-ip" ] && jq -e '.plugins[-1].type == "external-ip"' "$CONF/$PRIMARY" >/dev/null 2>&1
}

# k8s_rollout_restart: `kubectl rollout restart` replaces the installer pod
# (the old one gets SIGTERM, then the new one starts); the chain is polled
# every 50 ms from before the restart until the new pod is Ready.
k8s_rollout_restart() {
  local old polls=$T/chain-polls poller ok bad
  old=$(ds_uid)
  : >"$polls"
  (while [ ! -e "$T/chain-stop" ]; do
     if chained_now; then echo ok; else echo "unchained at $(date +%T.%N): $(ls -A "$CONF" "$BIN" | tr '\n' ' ')"; fi
     sleep 0.05
   done >>"$polls") &
  poller=$!
  check "kubectl rollout restart ds/external-ip" kubectl -n external-ip rollout restart ds/external-ip
  check "the restart rolls out" kubectl -n external-ip rollout status ds/external-ip --timeout=120s
  e2e_wait_for 60 "the new installer pod Ready" ds_ready
  sleep 1
  touch "$T/chain-stop"
  wait "$poller" || true
  if [ "$(ds_uid)" != "$old" ]; then pass "the installer pod was replaced ($old -> $(ds_uid))"
  else fail "the installer pod was not replaced: still $old"; fi
  ok=$(grep -c '^ok' "$polls" || true) bad=$(grep -c '^unchained' "$polls" || true)
  if [ "$bad" = 0 ] && [ "$ok" -ge 20 ]; then
    pass "the chain and the binary stayed in place through the restart (polled $ok times)"
  else
    fail "the restart unchained us $bad times out of $((ok + bad)) polls: $(grep -m3 '^unchained' "$polls")"
  fi
}

entry_ranges() { jq -c '.plugins[-1] | select(.type == "external-ip") | .allowedRanges' "$CONF/$PRIMARY"; }
ranges_are() { [ "$(entry_ranges)" = "$(jq -c . <<<"$1")" ]; }
ds_logs_say() { kubectl -n external-ip logs ds/external-ip 2>&1 | grep -q -- "$1"; }

# k8s_configmap_changes: a new allowedRanges reaches the chain through the
# mounted volume; a broken entry is refused and the last good one stays.
k8s_configmap_changes() {
  local good='["192.0.2.0/24", "198.51.100.0/24", "2001:db8::/32"]' vol
  k8s_configmap "$good" | kubectl apply -f - >&2
  e2e_wait_for 120 "the changed ConfigMap chained" ranges_are "$good"
  pass "the changed ConfigMap (allowedRanges + 198.51.100.0/24) is chained"
  k8s_configmap '["192.0.2.0/24", "not-a-range"]' | kubectl apply -f - >&2
  vol=$T/kubelet/pods/$(ds_uid)/volumes/kubernetes.io~configmap/plugin/plugin.json
  e2e_wait_for 120 "kubelet to update the mounted plugin.json" grep -q not-a-range "$vol"
  pass "kubelet updated the mounted plugin.json to the broken entry"
  e2e_wait_for 60 "the installer to refuse it" ds_logs_say not-a-range
  pass "the installer refuses it: $(kubectl -n external-ip logs ds/external-ip | grep -m1 not-a-range)"
  expect_eq "the last good entry stays chained" "$(jq -c . <<<"$good")" "$(entry_ranges)"
  check "the binary stays" test -x "$BIN/external-ip"
  k8s_configmap "$good" | kubectl apply -f - >&2
  e2e_wait_for 120 "the installer pod Ready again with the good entry" ds_ready
}

# ---------------------------------------------------------------- uninstall

# k8s_uninstall_doc: the file that documents the uninstall steps:
# docs/uninstall-steps.md, else the file with the "**Uninstall**" paragraph.
k8s_uninstall_doc() {
  if [ -f "$E2E_REPO/docs/uninstall-steps.md" ]; then echo docs/uninstall-steps.md; return; fi
  (cd "$E2E_REPO" && grep -l '^\*\*Uninstall\*\*' README.md docs/*.md 2>/dev/null | head -1)
}

# uninstall_as_documented: the documented uninstall steps (the first sh block
# after the "**Uninstall**" paragraph, or the first of docs/uninstall-steps.md),
# run exactly as written, with only the node's paths changed into ours, in a
# directory whose deploy/kubernetes/ holds the manifests as applied; then
# the conf dir must be as before the install, byte for byte, and nothing of
# ours may be left.
uninstall_as_documented() {
  local doc steps
  doc=$(k8s_uninstall_doc)
  [ -n "$doc" ] || die "no documented uninstall steps found (docs/uninstall-steps.md, README.md **Uninstall**)"
  steps=$(awk -v readme="$([ "$doc" = docs/uninstall-steps.md ] || echo 1)" '
    readme && /^\*\*Uninstall\*\*/ {s = 1; next}
    !readme && !s {s = 1}
    s == 1 && /^```(sh|bash|shell)/ {s = 2; next} s == 2 && /^```/ {exit} s == 2' "$E2E_REPO/$doc")
  [ -n "$steps" ] || die "no sh block in the uninstall steps of $doc"
  sed -e "s#/opt/cni/bin#$BIN#g" -e "s#/etc/cni/net.d#$CONF#g" -e "s#/run/cni/external-ip#$DATA#g" \
    <<<"$steps" >"$T/uninstall-steps.sh"
  log "the uninstall steps of $doc, with the node's paths:"
  sed 's/^/    /' "$T/uninstall-steps.sh" >&2
  check "the uninstall steps of $doc succeed" \
    hostns env -C "$T/site" PATH="$PATH" bash -eo pipefail "$T/uninstall-steps.sh"
  gone() { ! kubectl get namespace external-ip >/dev/null 2>&1; }
  e2e_wait_for 90 "the external-ip namespace gone" gone
  # A terminating installer that chained us again would have done so by now.
  sleep 2
  expect_eq "the conf dir is as before the install, byte for byte" "$(cat "$T/conf.before")" "$(k8s_snapshot "$CONF")"
  expect_eq "the bin dir is as before the install" "$(cat "$T/bin.before")" "$(k8s_snapshot "$BIN")"
  expect_eq "no holder device $E2E_HOLDER is left" "" "$(ip -n "$E2E_HOST_NS" -br link show dev "$E2E_HOLDER" 2>/dev/null)"
  expect_eq "no table inet external-ip is left" "" "$(hostns nft list table inet external-ip 2>/dev/null)"
}
