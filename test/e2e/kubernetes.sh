#!/usr/bin/env bash
# Recipe: the DaemonSet of deploy/kubernetes on a real single-node
# Kubernetes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet; containerd 1.6 + runc from Debian), offline, inside the "host"
# network namespace, all state under the recipe's temp dir. The manifests
# are applied as shipped except for the node's paths (CNI bin and conf dir,
# state dir, all under the temp dir) and allowedRanges. Asserts: the
# installer pod is Ready and the primary conflist ends with our entry; an
# annotated pod is reachable at its external IPs from the LAN namespace and
# sees the client's address, and its outbound flows leave from them;
# `kubectl exec ds/external-ip -- /external-ip status` shows them; deleting
# the pod releases the IPs and their rules; `kubectl rollout restart` never
# unchains us (polled); a changed ConfigMap is chained, a broken one keeps
# the last good entry; pools and claims (test/e2e/kubernetes/pools.sh: a
# Deployment of 3 gets 3 IPs of each family from a pool, reachable and
# leaving from them, released when scaled down; a StatefulSet pod keeps its
# IP; namespace, exhaustion and ownership refusals by the admission policy
# and by the node with events; the node process restarted mid-rollout;
# the API server stopped for 10 s during pool ADDs: code 11, the kubelet's
# retry succeeds, no claim leaks); with "standby": true in the plugin entry
# (test/e2e/kubernetes/standby.sh), a Deployment of 2 with one IP runs as
# two active co-holders on the one node, reachable, and its IP goes with
# it, the entry restored after;
# the documented uninstall steps, run as written,
# restore the conf dir byte for byte and leave nothing of ours; the machine's
# sysctls that kubelet writes are unchanged.
#   usage: kubernetes.sh    (root; install-deps.sh, make image and
#                            test/e2e/kubernetes/build.sh first)
#   env:   E2E_BIN, PLUGIN, IMAGE_TAR (default bin/external-ip-image.tar),
#          K8S_CACHE (see kubernetes/build.sh), K8S_DIR (the binaries from
#          elsewhere instead), E2E_KEEP=1, E2E_TIMEOUT
#          (give it 600: the control plane alone takes a minute to start)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init kubernetes

T=$E2E_TMP
IMAGE_TAR=${IMAGE_TAR:-$E2E_REPO/bin/external-ip-image.tar}
[ -f "$IMAGE_TAR" ] || die "no image archive $IMAGE_TAR: run make image"
if [ -n "${K8S_DIR:-}" ]; then K8S=$K8S_DIR
else K8S=$("$E2E_DIR/kubernetes/build.sh" --check 2>&1) || die "$K8S"; fi
# The node's directories, under the temp dir: /opt/cni/bin, /etc/cni/net.d,
# /run/cni/external-ip.
NODE=$T/node
BIN=$NODE/opt/cni/bin CONF=$NODE/etc/cni/net.d DATA=$NODE/run/cni/external-ip
E2E_EIP_DATA=$DATA     # what lib.sh's expect_status reads
PRIMARY=10-containerd-net.conflist
NODE_NAME=e2e-node
API=https://$E2E_HOST_V4:6443
RANGES='["192.0.2.0/24", "2001:db8::/32"]'
V4=192.0.2.30 V6=2001:db8:1::30
mkdir -p "$BIN" "$CONF" "$T/kube" "$T/path" "$T/site/deploy/kubernetes"
source "$E2E_DIR/kubernetes/node.sh"
source "$E2E_DIR/kubernetes/pools.sh"
source "$E2E_DIR/kubernetes/standby.sh"
e2e_defer "k8s_umount_under $T"

step "network namespaces; the machine's sysctls that kubelet writes, masked"
e2e_netns_setup
k8s_mask_sysctls
k8s_machine_paths >"$T/machine-paths.before"
step_done

step "images: pause and a test server (busybox, FROM scratch), ours from make image"
k8s_images
step_done

step "control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler"
k8s_control_plane
step_done

step "node: containerd (bridge + host-local primary, no external-ip) and kubelet"
jq '.plugins |= map(select(.type != "external-ip"))' "$E2E_EXAMPLES/containerd-annotation.conflist" >"$CONF/$PRIMARY"
for p in bridge host-local loopback; do cp "$E2E_BIN/$p" "$BIN/$p"; done
k8s_snapshot "$CONF" >"$T/conf.before"
cp -a "$CONF" "$T/conf.before.d"
k8s_snapshot "$BIN" >"$T/bin.before"
e2e_containerd_start "$BIN" "$CONF" localhost/e2e/pause:latest
for img in "$T/pause.oci.tar" "$T/server.oci.tar" "$IMAGE_TAR"; do
  "${CTR[@]}" images import --no-unpack=false "$img" >&2
done
k8s_kubelet
step_done

step "deploy/kubernetes, with the node's paths and allowedRanges"
k8s_site_manifests
# Pods are refused until the namespace's default ServiceAccount exists.
require "kubectl apply -f deploy/kubernetes/namespace.yaml" kubectl apply -f "$T/site/deploy/kubernetes/namespace.yaml"
e2e_wait_for 60 "the default ServiceAccount of namespace external-ip" kubectl -n external-ip get serviceaccount default
# The README's order: the CRDs, the node process's account and RBAC and the
# admission policies, then the ConfigMap and the DaemonSet.
site=$T/site/deploy/kubernetes
require "kubectl apply the CRDs, the ServiceAccount, RBAC and the admission policies" \
  kubectl apply -f "$site/external-ip.io_externalippools.yaml" -f "$site/external-ip.io_externalipclaims.yaml" \
  -f "$site/serviceaccount.yaml" -f "$site/clusterrole.yaml" -f "$site/clusterrolebinding.yaml" \
  -f "$site/role.yaml" -f "$site/rolebinding.yaml" $(for f in "$site"/policy-*.yaml; do printf -- '-f %s ' "$f"; done)
require "kubectl apply -f deploy/kubernetes/configmap.yaml -f deploy/kubernetes/daemonset.yaml" \
  kubectl apply -f "$site/configmap.yaml" -f "$site/daemonset.yaml"
check "the DaemonSet rolls out" kubectl -n external-ip rollout status ds/external-ip --timeout=120s
e2e_wait_for 60 "the installer pod Ready" ds_ready
pass "the installer pod is Ready (its readiness probe, install --check, passes)"
expect_eq "the primary conflist ends with our entry, with the ConfigMap's allowedRanges" \
  "external-ip $(jq -c . <<<"$RANGES")" "$(jq -c '.plugins[-1] | "\(.type) \(.allowedRanges | tojson)"' -r "$CONF/$PRIMARY")"
expect_eq "the primary's own plugins are untouched" "$(jq -c '.plugins' "$T/conf.before.d/$PRIMARY")" \
  "$(jq -c '.plugins[:-1]' "$CONF/$PRIMARY")"
check "the bin dir holds the image's binary" cmp "$BIN/external-ip" "$PLUGIN"
cri_chained() { "${CRICTL[@]}" info | jq -e '[.cniconfig.Networks[].Config.Plugins[].Network.type] | index("external-ip")'; }
e2e_wait_for 20 "containerd to load the chained config" cri_chained
step_done

step "a pod with the annotation external-ip/addresses=$V4,$V6"
k8s_lan_server
k8s_web_pod | kubectl apply -f - >&2
check "the pod becomes Ready" kubectl wait --for=condition=Ready pod/web --timeout=90s
SANDBOX=$("${CRICTL[@]}" pods --name web --state ready -q | head -1)
expect_holder "pod web running" "$V4" "$V6"
expect_status "pod web running" "{\"$V4\": [\"containerd-net/$SANDBOX/eth0\"], \"$V6\": [\"containerd-net/$SANDBOX/eth0\"]}"
lan_answers() { [ -n "$(lan_get "$1")" ]; }
e2e_wait_for 20 "the pod's server to answer the LAN" lan_answers "$V4"
expect_eq "the LAN reaches the pod at $V4:8080, and the pod sees the client's address" \
  "$E2E_LAN_V4" "$(lan_get "$V4")"
expect_eq "the LAN reaches the pod at [$V6]:8080, and the pod sees the client's address" \
  "$E2E_LAN_V6" "$(lan_get "$V6")"
expect_eq "the pod's outbound flow to the LAN leaves from $V4" \
  "$V4" "$(pod_get web "$E2E_LAN_V4")"
expect_eq "the pod's outbound flow to the LAN leaves from $V6" \
  "$V6" "$(pod_get web "$E2E_LAN_V6")"
check "kubectl exec ds/external-ip -- /external-ip status (--data-dir: the node's path) shows $V4 and $V6" \
  bash -c "kubectl -n external-ip exec ds/external-ip -- /external-ip status --data-dir '$DATA' | tee /dev/stderr | grep -F ' $V4 ' && kubectl -n external-ip exec ds/external-ip -- /external-ip status --data-dir '$DATA' | grep -F ' $V6 '"
step_done

step "delete the pod"
check "kubectl delete pod web" kubectl delete pod web --timeout=60s
released() { [ -z "$(e2e_holder_ips)" ]; }
e2e_wait_for 30 "the IPs released" released
expect_holder "after kubectl delete pod web"
expect_status "after kubectl delete pod web" '{}'
expect_eq "no rule of table inet external-ip names $V4 or $V6" "" \
  "$(hostns nft list table inet external-ip 2>/dev/null | grep -F -e "$V4" -e "$V6")"
step_done

step "kubectl rollout restart, with the chain polled"
k8s_rollout_restart
step_done

step "ConfigMap: a changed entry is chained, a broken one keeps the last good entry"
k8s_configmap_changes
step_done

step "pools: pool web for the namespaces labelled external-ip-e2e=allowed"
pools_namespace team-a allowed
pools_namespace team-b
require "kubectl apply pool web" pools_pool web '["192.0.2.100-192.0.2.109", "2001:db8:1::100-2001:db8:1::109"]' \
  '{"namespaceSelector": {"matchLabels": {"external-ip-e2e": "allowed"}}}'
e2e_wait_for 60 "the node process to publish that the cluster has pools" test -f "$DATA/claims/pools"
e2e_wait_for 30 "pool web published for the admission policy" published web
pool_ready() { kubectl get externalippool web -o json | jq -e '.status.conditions[] | select(.type == "Ready" and .status == "True")'; }
e2e_wait_for 30 "pool web Ready" pool_ready
check "kubectl get externalippools shows pool web's ranges, used 0, free 20" \
  bash -c "kubectl get externalippools | tee /dev/stderr | grep -E '^web +\\[\"192.0.2.100-192.0.2.109\",\"2001:db8:1::100-2001:db8:1::109\"\\] +0 +20 +Ready'"
step_done

step "a Deployment of 3 replicas asking pool web; scaled to 1"
pools_deployment_step
step_done

step "a StatefulSet pod deleted comes back with its IP"
pools_statefulset_step
step_done

step "a namespace the pool does not admit: the admission policy, then the node"
pools_namespace_step
step_done

step "a pool of 2 IPs and 3 replicas"
pools_exhausted_step
step_done

step "a pod naming another's IP: of namespace team-b, then of team-a naming web's"
pools_owner_step
step_done

step "pool web's IPv4 range edited off the IP its pod holds, then back"
pools_shrink_step
step_done

step "standby: true in the plugin entry; a Deployment of 2 with one IP, co-holders on the one node"
standby_step
step_done

step "the node process restarted during a rollout"
pools_restart_step
step_done

step "the API server stopped for 10 s during pool ADDs"
pools_apiserver_step
step_done

step "the documented uninstall steps"
uninstall_as_documented
step_done

step "the machine's sysctls and paths"
k8s_check_sysctls
k8s_stop_kubelet
expect_eq "no default path of Kubernetes, etcd, containerd or CNI appeared on the machine" \
  "$(cat "$T/machine-paths.before")" "$(k8s_machine_paths)"
step_done
