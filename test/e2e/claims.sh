#!/usr/bin/env bash
# Recipe: the cluster's claims against a real API server (etcd and
# kube-apiserver of test/e2e/kubernetes/build.sh; no kubelet), with two node
# processes (external-ip-node install --watch --node-name, two node names,
# each its own data dir and socket) running as the ServiceAccount of
# deploy/kubernetes with exactly its RBAC, driven through their sockets by
# test/e2e/claimsdriver as the plugin drives them. Asserts: the CRDs, the
# RBAC and the admission policies of deploy/kubernetes are accepted; the
# policies refuse a reversed range, an overlapping pool, an unknown pool and
# a namespace the pool does not admit, with their messages; the node
# processes' watches of claims stay open; as a node process, a change of
# another pod's image, or of a pod of another node, is refused by the
# policy on the node process's pod writes, and its own annotation is not; 100 pods racing
# for a pool of 50 IPs over the two nodes get 50 claims, 50 refusals
# "pool exhausted" and no IP twice; with the API server stopped for 10 s
# during pool requests, they answer "try again later" (code 11), succeed on
# the retry and leave no claim; 1,000 claim/release cycles leave 0 claims
# within 60 s; `kubectl get` of pools and claims reads well.
#   usage: claims.sh    (root; install-deps.sh, make build and
#                        test/e2e/kubernetes/build.sh first)
#   env:   NODE_BIN (default bin/external-ip-node), K8S_CACHE, K8S_DIR,
#          E2E_KEEP=1, E2E_TIMEOUT (give it 600)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init claims

T=$E2E_TMP
NODE_BIN=${NODE_BIN:-$E2E_REPO/bin/external-ip-node}
[ -x "$NODE_BIN" ] || die "no $NODE_BIN: run make build"
if [ -n "${K8S_DIR:-}" ]; then K8S=$K8S_DIR
else K8S=$("$E2E_DIR/kubernetes/build.sh" --check 2>&1) || die "$K8S"; fi
NODE_NAME=e2e-node  # node.sh's token file names one
API=https://$E2E_HOST_V4:6443
DEPLOY=$E2E_REPO/deploy/kubernetes
mkdir -p "$T/kube" "$T/path"
source "$E2E_DIR/kubernetes/node.sh"

# The node processes' identity: the ServiceAccount of deploy/kubernetes,
# each with a token bound to its Node as the kubelet binds a pod's to its
# node (minted below, once the Nodes exist). A token of the token file is
# the same account bound to no node: the policy on pod writes refuses it.
SA_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
K8S_EXTRA_TOKENS="$SA_TOKEN,system:serviceaccount:external-ip:external-ip,e2e-sa,\"system:serviceaccounts,system:serviceaccounts:external-ip\""

step "network namespaces; etcd and kube-apiserver"
e2e_netns_setup
k8s_api
k8s_kubeconfig sa "$SA_TOKEN"
step_done

step "deploy/kubernetes: CRDs, namespace, RBAC, admission policies"
require "the CRDs are accepted" kubectl apply -f "$DEPLOY/external-ip.io_externalippools.yaml" -f "$DEPLOY/external-ip.io_externalipclaims.yaml"
check "the CRDs are established" kubectl wait --for=condition=Established crd/externalippools.external-ip.io crd/externalipclaims.external-ip.io --timeout=60s
require "the namespace, ServiceAccount and RBAC are accepted" kubectl apply -f "$DEPLOY/namespace.yaml" -f "$DEPLOY/serviceaccount.yaml" \
  -f "$DEPLOY/clusterrole.yaml" -f "$DEPLOY/clusterrolebinding.yaml" -f "$DEPLOY/role.yaml" -f "$DEPLOY/rolebinding.yaml"
policies=()
for f in "$DEPLOY"/policy-*.yaml; do policies+=(-f "$f"); done
require "the admission policies and their bindings are accepted" kubectl apply "${policies[@]}"
claims_policies_ready() {
  kubectl get validatingadmissionpolicies -o json |
    jq -e '[.items[] | select(.metadata.name | startswith("external-ip-"))] | length == 5 and all(.status.typeChecking == null or (.status.typeChecking.expressionWarnings // [] | length == 0))'
}
e2e_wait_for 60 "the policies type-checked" claims_policies_ready
pass "the 5 policies type-check with no warning: $(kubectl get validatingadmissionpolicies -o json | jq -c '[.items[] | {n: .metadata.name, w: (.status.typeChecking.expressionWarnings // [])}]')"
kubectl create namespace claims >&2
kubectl -n claims create serviceaccount default >&2 || true
for n in 1 2; do
  kubectl create -f - >&2 <<EOF
apiVersion: v1
kind: Node
metadata: {name: e2e-n$n, labels: {e2e-node: "n$n"}}
EOF
  token=$(kubectl -n external-ip create token external-ip --bound-object-kind Node --bound-object-name "e2e-n$n" --duration 4h) ||
    die "kubectl create token bound to node e2e-n$n"
  k8s_kubeconfig "sa-n$n" "$token"
done
step_done

# claims_pool NAME RANGES [SPEC-JSON]: a pool every namespace may draw from;
# claims_pool_dry: the same, a server-side dry run.
claims_pool_json() {
  jq -n --arg name "$1" --argjson ranges "$2" --argjson extra "${3:-{\}}" \
    '{apiVersion: "external-ip.io/v1alpha1", kind: "ExternalIPPool", metadata: {name: $name},
      spec: ({ranges: $ranges, namespaceSelector: {}} + $extra)}'
}
claims_pool() { claims_pool_json "$@" | kubectl apply -f -; }
claims_pool_dry() { claims_pool_json "$@" | kubectl create --dry-run=server -f -; }
# claims_refused POLICY CMD...: CMD fails, refused by POLICY. The API
# server's admission plugin loads a policy and its binding from an informer
# of its own, a while after they are accepted and type-checked: until then
# what the policy refuses goes in. So each step waits first for a dry run
# that its policy refuses.
claims_refused() {
  local policy=$1 out; shift
  ! out=$("$@" 2>&1) && grep -q -- "ValidatingAdmissionPolicy '$policy'" <<<"$out"
}

step "the policies refuse what the node would"
e2e_wait_for 30 "policy external-ip-pool-ranges in force" \
  claims_refused external-ip-pool-ranges claims_pool_dry probe '["192.0.2.20-192.0.2.3"]'
expect_fail "a reversed range is refused at the API" "192.0.2.20-192.0.2.3 has first after last" \
  claims_pool reversed '["192.0.2.20-192.0.2.3"]'
expect_fail "a range of loopback addresses is refused at the API" "spec.ranges: 127.0.0.0/29 holds loopback addresses" \
  claims_pool loopback '["127.0.0.0/29"]'
expect_fail "a range reaching into IPv6 multicast is refused at the API" "spec.ranges: feff::ffff-ff00::1 holds multicast addresses" \
  claims_pool multicast '["2001:db8::/64", "feff::ffff-ff00::1"]'
expect_fail "a range written with host bits is refused by the schema" "a CIDR must have no host bits set" \
  claims_pool sloppy '["192.0.2.1/24"]'
require "a pool of 50 IPs" claims_pool fifty '["198.51.100.1-198.51.100.50"]'
e2e_wait_for 30 "policy external-ip-pool-overlaps in force" \
  claims_refused external-ip-pool-overlaps claims_pool_dry probe '["198.51.100.0/26"]'
expect_fail "a pool overlapping it is refused, naming both ranges and the pool" \
  "spec.ranges: 198.51.100.0/26 overlaps 198.51.100.1-198.51.100.50 of pool fifty: pools may not share an IP" \
  claims_pool over '["198.51.100.0/26"]'
step_done

# node_process N: external-ip-node as node e2e-nN, with its own bin, conf
# and data dirs, as the ServiceAccount.
node_process() {
  local n=$1 d=$T/n$1
  mkdir -p "$d/bin" "$d/conf" "$d/data"
  jq '.plugins |= map(select(.type != "external-ip"))' "$E2E_EXAMPLES/containerd-annotation.conflist" >"$d/conf/10-test.conflist"
  jq -n --arg data "$d/data" '{type: "external-ip", allowedRanges: [], dataDir: $data}' >"$d/plugin.json"
  k8s_daemon "node-process-$n" "$NODE_BIN" install --watch --plugin-config="$d/plugin.json" --plugin-binary="$PLUGIN" \
    --bin-dir="$d/bin" --conf-dir="$d/conf" --data-dir="$d/data" \
    --node-name="e2e-n$n" --kubeconfig="$T/kube/sa-n$n.kubeconfig" --namespace=external-ip
  eval "NODE_PID_$n=$K8S_PID"
  e2e_wait_for 60 "node process $n's socket" test -S "$d/data/node.sock"
  e2e_wait_for 60 "node process $n's caches" grep -q '"claims: caches synced"' "$T/node-process-$n.log"
}

step "two node processes, as the ServiceAccount, each with its node's token"
node_process 1
node_process 2
e2e_wait_for 30 "the pools published to the plugin" test -f "$T/n1/data/claims/pools"
pass "both serve claims; the plugin's file says the cluster has pools: $(cat "$T/n1/data/claims/pools")"
e2e_wait_for 30 "the leader's ConfigMap for the policies" kubectl -n external-ip get configmap external-ip-pools
step_done

step "the node processes' watches stay open"
# A client-wide timeout (client-go's REST Timeout) would also bound the
# reading of a watch's body: every informer would end its watch and
# reconnect at that period. The API server counts a watch as it ends, and
# nothing but the node processes watches claims here.
claims_watches_ended() {
  kubectl get --raw /metrics |
    awk '/^apiserver_request_total[{]/ && /verb="WATCH"/ && /resource="externalipclaims"/ {n += $NF} END {print n + 0}'
}
w0=$(claims_watches_ended)
sleep 15
w1=$(claims_watches_ended)
check "the node processes' watches of claims stay open for 15 s: $((w1 - w0)) ended (a 5 s timeout would end 6)" test $((w1 - w0)) -le 2
step_done

DRIVER=$T/claimsdriver
(cd "$E2E_REPO" && go build -o "$DRIVER" ./test/e2e/claimsdriver) || die "building test/e2e/claimsdriver"
drive() { hostns "$DRIVER" "$@" -kubeconfig "$T/kube/admin.kubeconfig"; }
claims_in() { kubectl get externalipclaims -l "external-ip.io/pool=$1" -o name | wc -l; }

step "100 pods on two nodes race for a pool of 50"
race=$(drive race -nodes "$T/n1/data=e2e-n1,$T/n2/data=e2e-n2" -pods 100 -pool fifty -namespace claims) || die "claimsdriver race: $race"
log "race: $race"
expect_eq "50 granted, 50 refused as exhausted, nothing else" "50 50 0" "$(jq -r '"\(.Granted) \(.Exhausted) \(.Other)"' <<<"$race")"
expect_eq "no IP given twice" "null" "$(jq -c .Twice <<<"$race")"
expect_eq "50 claims in the API" 50 "$(claims_in fifty)"
expect_eq "50 distinct addresses among them" 50 "$(kubectl get externalipclaims -l external-ip.io/pool=fifty -o json | jq '[.items[].spec.address] | unique | length')"
pool_free() { [ "$(kubectl get externalippool fifty -o jsonpath='{.status.used}/{.status.free}')" = "$1" ]; }
e2e_wait_for 30 "pool fifty's status 50/0" pool_free 50/0
annotated() { kubectl -n claims get pods -o json | jq '[.items[] | select(.metadata.annotations["external-ip/assigned"] and .metadata.labels["external-ip.io/holder"] == "true")] | length'; }
fifty_annotated() { [ "$(annotated)" = 50 ]; }
e2e_wait_for 30 "the 50 granted pods annotated and labelled by their node's process" fifty_annotated
pass "the node processes' own pod writes pass the policy on them: 50 pods annotated"
log "kubectl get externalippools:"; kubectl get externalippools >&2
log "kubectl get externalipclaims (5 of them):"; kubectl get externalipclaims | sed -n 1,6p >&2
check "kubectl get externalippools reads ranges, used and free" \
  bash -c "kubectl get externalippools fifty | tee /dev/stderr | grep -E 'fifty +\\[\"198.51.100.1-198.51.100.50\"\\] +50 +0 +Ready'"
check "kubectl get externalipclaims reads address, pool, namespace, pod and node" \
  bash -c "kubectl get externalipclaims | grep -E '^198-|^198\\.' | head -1 | grep -E '198\\.51\\.100\\.[0-9]+ +fifty +claims +p[0-9]+ +e2e-n[12]'"
exhausted_events=$(kubectl -n claims get events --field-selector reason=PoolExhausted -o json | jq '.items | length')
check "the refusals are events PoolExhausted on the pods ($exhausted_events)" test "$exhausted_events" -ge 1
# No kubelet here to confirm a graceful deletion: the pods go at once, as
# a node that never comes back has them force-deleted.
kubectl -n claims delete pods --all --grace-period=0 --force >&2
e2e_wait_for 90 "the leader to release the claims of the deleted pods (no DEL came)" bash -c "[ \$(kubectl get externalipclaims -l external-ip.io/pool=fifty -o name | wc -l) = 0 ]"
pass "the claims of pods deleted without a DEL are released by the leader"
step_done

step "the admission policies on pods"
require "a pool for namespace claims only" claims_pool only-claims '["203.0.113.0/28"]' '{"namespaceSelector": null, "namespaces": ["claims"]}'
e2e_wait_for 30 "the leader's ConfigMap names it" bash -c "kubectl -n external-ip get configmap external-ip-pools -o json | jq -e '.data[\"only-claims\"]'"
claims_pod() { # NAMESPACE ANNOTATIONS-JSON [KUBECTL-FLAGS...]
  jq -n --arg ns "$1" --argjson a "$2" '{apiVersion: "v1", kind: "Pod", metadata: {generateName: "asks-", namespace: $ns, annotations: $a},
    spec: {nodeName: "e2e-n1", automountServiceAccountToken: false, containers: [{name: "c", image: "localhost/e2e/none:latest"}]}}' |
    kubectl create "${@:3}" -f -
}
kubectl create namespace other >&2
kubectl -n other create serviceaccount default >&2 || true
e2e_wait_for 30 "policy external-ip-pod-pools in force" \
  claims_refused external-ip-pod-pools claims_pod claims '{"external-ip/pool": "nope"}' --dry-run=server
e2e_wait_for 30 "policy external-ip-pod-namespaces in force" \
  claims_refused external-ip-pod-namespaces claims_pod other '{"external-ip/pool": "only-claims"}' --dry-run=server
expect_fail "a pod asking an unknown pool is refused at creation" "external-ip/pool: no pool named nope" claims_pod claims '{"external-ip/pool": "nope"}'
expect_fail "a pod of a namespace the pool does not admit is refused at creation" \
  "external-ip/pool: pool only-claims does not admit namespace other" claims_pod other '{"external-ip/pool": "only-claims"}'
expect_fail "a pod naming an IP of a pool that does not admit its namespace is refused" \
  "external-ip/addresses: 203.0.113.5: pool only-claims does not admit namespace other" claims_pod other '{"external-ip/addresses": "203.0.113.5"}'
expect_fail "a pod naming an IP in no pool is refused" "external-ip/addresses: 192.0.2.77: lies in no pool" \
  claims_pod claims '{"external-ip/addresses": "192.0.2.77"}'
check "a pod asking a pool that admits it is created" claims_pod claims '{"external-ip/pool": "only-claims"}'
step_done

step "the node process may change only its annotation and label, on pods of its node"
# as_node N ARGS...: kubectl as node process N (sa-nN), or as the token of
# the token file (N=none: bound to no node).
as_node() { local k=$T/kube/sa-n$1.kubeconfig; [ "$1" != none ] || k=$T/kube/sa.kubeconfig; shift; hostns "$K8S/kubectl" --kubeconfig="$k" "$@"; }
for n in 1 2; do
  jq -n --arg n "$n" '{apiVersion: "v1", kind: "Pod", metadata: {name: "on-n\($n)", namespace: "claims", labels: {app: "x"}},
    spec: {nodeName: "e2e-n\($n)", automountServiceAccountToken: false, containers: [{name: "c", image: "localhost/e2e/none:latest"}]}}' |
    kubectl create -f - >&2
done
ours='{"metadata": {"annotations": {"external-ip/assigned": "203.0.113.1"}, "labels": {"external-ip.io/holder": "true"}}}'
e2e_wait_for 30 "policy external-ip-node-pods in force" \
  claims_refused external-ip-node-pods as_node none -n claims patch pod on-n1 --dry-run=server --type=merge -p "$ours"
check "node process 1 writes its annotation and label on a pod of its node (server-side dry run)" \
  as_node 1 -n claims patch pod on-n1 --dry-run=server --type=merge -p "$ours"
expect_fail "it may not change that pod's image (server-side dry run): Forbidden" \
  "Forbidden.*external-ip-node may change only a pod's annotation external-ip/assigned and label external-ip.io/holder" \
  as_node 1 -n claims patch pod on-n1 --dry-run=server -p '{"spec": {"containers": [{"name": "c", "image": "localhost/e2e/evil:latest"}]}}'
expect_fail "it may not change another label of it" "Forbidden.*may change only" \
  as_node 1 -n claims patch pod on-n1 --dry-run=server --type=merge -p '{"metadata": {"labels": {"app": "y"}}}'
expect_fail "it may not write its annotation on a pod of node e2e-n2" "Forbidden.*external-ip-node of node e2e-n1 may change only the pods of its node" \
  as_node 1 -n claims patch pod on-n2 --dry-run=server --type=merge -p "$ours"
expect_fail "its account with a token bound to no node may change no pod" "Forbidden.*token names no node" \
  as_node none -n claims patch pod on-n1 --dry-run=server --type=merge -p "$ours"
expect_eq "nothing was written: no annotation on on-n1" "" \
  "$(kubectl -n claims get pod on-n1 -o jsonpath='{.metadata.annotations.external-ip/assigned}')"
kubectl -n claims delete pod on-n1 on-n2 --grace-period=0 --force >&2
step_done

# claims_errors N FROM: node process N's ERROR lines from line FROM on.
claims_errors() { tail -n "+$2" "$T/node-process-$1.log" | grep '"level":"ERROR"' | head -3; }
for n in 1 2; do
  expect_eq "node process $n logged no error so far" "" "$(claims_errors "$n" 1)"
done

step "the API server stopped for 10 s during pool requests"
require "a pool of 16" claims_pool sixteen '["192.0.2.16/28"]'
e2e_wait_for 30 "the node processes to see it" bash -c "jq -e '.pools | index(\"sixteen\")' '$T/n1/data/claims/pools'"
(drive retry -nodes "$T/n1/data=e2e-n1" -pods 10 -pool sixteen -namespace claims -ready "$T/retry-ready" \
  -stop "$T/apiserver-stopped" >"$T/retry.json" 2>"$T/retry.err"; echo $? >"$T/retry.rc") &
retry_pid=$!
e2e_wait_for 60 "the driver's pods made" test -f "$T/retry-ready"
sleep 1  # two pods granted first
touch "$T/apiserver-stopped"
e2e_kill_pid "$K8S_APISERVER_PID" 5
log "kube-apiserver stopped"
sleep 10
rm -f "$T/apiserver-stopped"
k8s_apiserver
log "kube-apiserver started again"
wait "$retry_pid" || true
retry=$(cat "$T/retry.json")
log "retry: $retry $(cat "$T/retry.err")"
expect_eq "the driver finished" 0 "$(cat "$T/retry.rc")"
expect_eq "every pod was granted in the end, none refused" "10 null" "$(jq -r '"\(.Granted) \(.Refused)"' <<<"$retry")"
check "while the API server was stopped, requests answered 'try again later' (code 11): $(jq -c .Messages <<<"$retry")" \
  test "$(jq .WhileStopped <<<"$retry")" -ge 1
e2e_wait_for 60 "no claim left of pool sixteen" bash -c "[ \$(kubectl get externalipclaims -l external-ip.io/pool=sixteen -o name | wc -l) = 0 ]"
pass "no claim leaked: every sandbox's claim released, those the API server never answered for too"
# The node processes logged the API server's absence (their Lease, their
# watches, its authorizer not ready at its start); from here on, nothing.
sleep 5
for n in 1 2; do eval "CLAIMS_MARK_$n=$(( $(wc -l <"$T/node-process-$n.log") + 1 ))"; done
step_done

step "1,000 claim and release cycles"
# Just after its restart the API server refuses a pool for a few seconds:
# the policies whose parameter is a pool wait for its discovery of the CRD
# ("failed to find resource referenced by paramKind").
e2e_wait_for 30 "a pool of 14 accepted by the restarted API server's policies" claims_pool cycles '["192.0.2.32/28"]'
pass "a pool of 14"
e2e_wait_for 30 "the node process to see it" bash -c "jq -e '.pools | index(\"cycles\")' '$T/n1/data/claims/pools'"
kubectl create namespace cycles >&2
kubectl -n cycles create serviceaccount default >&2 || true
t0=$(date +%s)
cycles=$(drive cycles -nodes "$T/n1/data=e2e-n1" -pods 1000 -pool cycles -namespace cycles) || die "claimsdriver cycles: $cycles"
log "cycles: $(jq -c '{Cycles, Granted, errors: (.Errors // [] | length)}' <<<"$cycles") in $(( $(date +%s) - t0 ))s"
expect_eq "1,000 cycles, each granted" "1000 1000" "$(jq -r '"\(.Cycles) \(.Granted)"' <<<"$cycles")"
e2e_wait_for 60 "0 claims of pool cycles" bash -c "[ \$(kubectl get externalipclaims -l external-ip.io/pool=cycles -o name | wc -l) = 0 ]"
pass "0 claims left after 1,000 cycles"
step_done

step "the node processes' logs"
for n in 1 2; do
  mark=CLAIMS_MARK_$n
  expect_eq "node process $n logged no error after the API server was back" "" "$(claims_errors "$n" "${!mark}")"
done
step_done
