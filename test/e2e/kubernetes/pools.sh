# shellcheck shell=bash
# The pools and claims steps of test/e2e/kubernetes.sh, on its node: source
# after node.sh. Every pod here runs the test server image (busybox httpd on
# :8080), so that the LAN can reach it at the IPs it was given.

# pools_namespace NAME [LABEL]: a namespace, labelled external-ip-e2e=LABEL
# when given, with its default ServiceAccount.
pools_namespace() {
  kubectl create namespace "$1" >&2
  [ -z "${2:-}" ] || kubectl label namespace "$1" "external-ip-e2e=$2" >&2
  e2e_wait_for 60 "the default ServiceAccount of $1" kubectl -n "$1" get serviceaccount default
}

# pools_pool NAME RANGES-JSON [SPEC-JSON]: a pool; the spec's other fields
# from SPEC-JSON.
pools_pool() {
  jq -n --arg name "$1" --argjson ranges "$2" --argjson extra "${3:-{\}}" \
    '{apiVersion: "external-ip.io/v1alpha1", kind: "ExternalIPPool", metadata: {name: $name}, spec: ({ranges: $ranges} + $extra)}' |
    kubectl apply -f -
}

# pools_template ANNOTATIONS-JSON: a pod template of the test server, which
# stops at once on SIGTERM (busybox httpd as PID 1 ignores it: every stop
# would wait out the grace period).
pools_template() {
  jq -n --argjson a "$1" '{metadata: {labels: {app: "x"}, annotations: $a},
    spec: {automountServiceAccountToken: false, enableServiceLinks: false, terminationGracePeriodSeconds: 2,
      containers: [{name: "web", image: "localhost/e2e/server:latest", imagePullPolicy: "Never",
        command: ["/bin/sh", "-c", "trap \"exit 0\" TERM; /bin/httpd -f -p 8080 -h /www & wait"]}]}}'
}

# pools_workload KIND NAME NS REPLICAS ANNOTATIONS-JSON: a Deployment or a
# StatefulSet of the test server.
pools_workload() {
  pools_template "$5" | jq --arg kind "$1" --arg name "$2" --arg ns "$3" --argjson n "$4" \
    '.metadata.labels.app = $name | {apiVersion: "apps/v1", kind: $kind, metadata: {name: $name, namespace: $ns},
      spec: ({replicas: $n, selector: {matchLabels: {app: $name}}, template: .}
             + (if $kind == "StatefulSet" then {serviceName: $name, podManagementPolicy: "Parallel"} else {} end))}' |
    kubectl apply -f -
}

# pools_bare_pod NAME NS ANNOTATIONS-JSON: one pod of the test server.
pools_bare_pod() {
  pools_template "$3" | jq --arg name "$1" --arg ns "$2" \
    '.metadata.name = $name | .metadata.namespace = $ns | {apiVersion: "v1", kind: "Pod", metadata: .metadata, spec: .spec}' |
    kubectl create -f -
}

# pods_of NS APP: the running (not terminating) pods of a workload, as
# "name assigned-IPs" lines.
pods_of() {
  kubectl -n "$1" get pods -l "app=$2" -o json | jq -r '.items[] | select(.metadata.deletionTimestamp == null)
    | "\(.metadata.name) \(.metadata.annotations["external-ip/assigned"] // "")"'
}
ready_count() { kubectl -n "$1" get pods -l "app=$2" -o json | jq '[.items[] | select(.metadata.deletionTimestamp == null)
  | select(.status.conditions // [] | any(.type == "Ready" and .status == "True"))] | length'; }
claims_of() { kubectl get externalipclaims -l "external-ip.io/pool=$1" -o json | jq -r '[.items[].spec.address] | sort | join(" ")'; }
claim_count() { kubectl get externalipclaims -l "external-ip.io/pool=$1" -o json | jq '.items | length'; }
# is N CMD...: CMD prints N.
is() { [ "$("${@:2}")" = "$1" ]; }
annotated_count() { pods_of "$1" "$2" | awk 'NF == 2' | wc -l; }
assigned_to() { kubectl -n "$1" get pod "$2" -o json | jq -e '.metadata.annotations["external-ip/assigned"] // empty' >/dev/null; }
claims_of_ordinal() { kubectl get externalipclaims -o json | jq --arg s "$1" --argjson o "$2" '[.items[] | select(.spec.owner.statefulSet.name == $s and .spec.owner.statefulSet.ordinal == $o)] | length'; }
published() { kubectl -n external-ip get configmap external-ip-pools -o json | jq -e --arg p "$1" '.data[$p]' >/dev/null; }
has_event() { events_of "$@" | grep -q .; }
# events_of NS POD REASON: the messages of the pod's events of that reason.
events_of() {
  kubectl -n "$1" get events -o json | jq -r --arg pod "$2" --arg reason "$3" \
    '.items[] | select(.involvedObject.name == $pod and .reason == $reason) | .message'
}

# pools_deployment_step: a Deployment of 3 asking pool web gets 3 distinct
# IPs of each family, each reachable from the LAN at its IP, its flows
# leaving from it; scaled to 1, two pods' claims and IPs go from the node.
pools_deployment_step() {
  local line name v4 v6 all=() t0 gone
  pools_workload Deployment web team-a 3 '{"external-ip/pool": "web"}' >&2
  e2e_wait_for 120 "3 replicas of web Ready" is 3 ready_count team-a web
  e2e_wait_for 30 "the 3 pods annotated" is 3 annotated_count team-a web
  while read -r name assigned; do
    v4=${assigned%%,*} v6=${assigned##*,}
    all+=("$v4" "$v6")
    expect_eq "$name: the LAN reaches it at $v4 and it sees the client" "$E2E_LAN_V4" "$(lan_get "$v4")"
    expect_eq "$name: its outbound flow leaves from $v4" "$v4" "$(pod_get_ns team-a "$name" "$E2E_LAN_V4")"
    expect_eq "$name: its outbound flow leaves from $v6" "$v6" "$(pod_get_ns team-a "$name" "$E2E_LAN_V6")"
  done < <(pods_of team-a web)
  expect_eq "the 3 pods have 6 distinct IPs, one of each family each" 6 "$(printf '%s\n' "${all[@]}" | sort -u | grep -c .)"
  expect_eq "6 claims of pool web, those IPs" "$(e2e_sorted "${all[@]}")" "$(e2e_sorted $(claims_of web))"
  expect_eq "the node holds exactly them" "$(e2e_sorted "${all[@]}")" "$(e2e_holder_ips)"
  t0=$(date +%s.%N)
  kubectl -n team-a scale deployment web --replicas=1 >&2
  gone() { [ "$(claim_count web)" = 2 ] && [ "$(e2e_holder_ips | wc -w)" = 2 ]; }
  e2e_wait_for 60 "two pods' claims and IPs gone" gone
  gone=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  # The goal is 5 s; a test asserts no timing (the machine's load decides
  # it), so the figure is printed, with where the time went.
  pass "scaled to 1, two pods' claims and IPs are gone from the node, ${gone}s after kubectl scale (goal 5 s; $(teardown_times "$t0"))"
  expect_eq "the one left holds its IPs" "$(e2e_sorted $(claims_of web))" "$(e2e_holder_ips)"
}

# teardown_times T0: how long containerd's network teardowns of the sandboxes
# stopped since T0 (epoch seconds) took, from its log.
teardown_times() {
  awk -v t0="$(date -u -d "@${1%.*}" +%Y-%m-%dT%H:%M:%S)" -F'"' '
    function secs(ts) { split(substr(ts, 12), a, ":"); return a[1] * 3600 + a[2] * 60 + a[3] }
    $2 >= t0 && /msg="StopPodSandbox for/ { start[$5] = secs($2) }
    $2 >= t0 && /msg="TearDown network for sandbox/ && ($5 in start) { printf "%s%.1fs", sep, secs($2) - start[$5]; sep = ", " }
    END { if (!sep) printf "none seen" }' "$T/containerd.log" | sed 's/^/containerd teardowns: /'
}

# pod_get_ns NS POD IP: what the LAN's server at IP:8081 says POD's address is.
pod_get_ns() { kubectl -n "$1" exec "$2" -- sh -c "printf 'GET /cgi-bin/ip HTTP/1.0\r\n\r\n' | nc -w 5 $3 8081" | k8s_addr; }

# pools_statefulset_step: a StatefulSet pod deleted comes back, with a new
# UID, with its IP.
pools_statefulset_step() {
  local before after uid
  pools_workload StatefulSet db team-a 2 '{"external-ip/pool": "web"}' >&2
  e2e_wait_for 120 "db-0 and db-1 Ready" is 2 ready_count team-a db
  e2e_wait_for 30 "db-1 annotated" assigned_to team-a db-1
  before=$(kubectl -n team-a get pod db-1 -o jsonpath='{.metadata.annotations.external-ip/assigned}')
  uid=$(kubectl -n team-a get pod db-1 -o jsonpath='{.metadata.uid}')
  kubectl -n team-a delete pod db-1 --wait=true >&2
  new_db1() { [ "$(kubectl -n team-a get pod db-1 -o jsonpath='{.metadata.uid}' 2>/dev/null)" != "$uid" ] && [ "$(ready_count team-a db)" = 2 ]; }
  e2e_wait_for 120 "db-1 back and Ready" new_db1
  e2e_wait_for 30 "the new db-1 annotated" assigned_to team-a db-1
  after=$(kubectl -n team-a get pod db-1 -o jsonpath='{.metadata.annotations.external-ip/assigned}')
  expect_eq "db-1, deleted and made again (new UID), has its IPs again" "$before" "$after"
  expect_eq "the LAN reaches the new db-1 at ${after%%,*}" "$E2E_LAN_V4" "$(lan_get "${after%%,*}")"
  kubectl -n team-a scale statefulset db --replicas=1 >&2
  e2e_wait_for 60 "db-1's claims released once the StatefulSet is scaled below it" is 0 claims_of_ordinal db 1
  pass "scaled to 1, ordinal 1's IPs are released"
  kubectl -n team-a delete statefulset db --wait=true >&2
  e2e_wait_for 60 "db-0's claims released with the StatefulSet" is 0 claims_of_ordinal db 0
  pass "the StatefulSet deleted, its claims are released"
}

# pools_namespace_step: a pod of a namespace pool web does not admit is
# refused by the admission policy; without the policy, by the node, with
# an event on the pod.
pools_namespace_step() {
  expect_fail "a pod of namespace team-b asking pool web is refused at creation" \
    "external-ip/pool: pool web does not admit namespace team-b" pools_bare_pod intruder team-b '{"external-ip/pool": "web"}'
  kubectl delete validatingadmissionpolicybinding external-ip-pod-namespaces >&2
  # The API server's policy cache follows the deletion within a second.
  e2e_wait_for 30 "the policy no longer applied" pools_bare_pod intruder team-b '{"external-ip/pool": "web"}'
  pass "without the policy, the pod is created"
  e2e_wait_for 60 "the node's event on the pod" has_event team-b intruder NamespaceNotAdmitted
  expect_eq "the node refuses it with the event NamespaceNotAdmitted" \
    "external-ip/pool: pool web does not admit namespace team-b" "$(events_of team-b intruder NamespaceNotAdmitted | head -1)"
  expect_eq "it holds nothing and is not Ready" "" "$(kubectl -n team-b get pod intruder -o jsonpath='{.metadata.annotations.external-ip/assigned}')"
  kubectl -n team-b delete pod intruder --wait=true >&2
  kubectl apply -f "$T/site/deploy/kubernetes/policy-pod-namespaces-binding.yaml" >&2
}

# pools_exhausted_step: a pool of 2 IPs and 3 replicas: two run, the third
# stays pending with the event PoolExhausted.
pools_exhausted_step() {
  local pending
  pools_pool tiny '["192.0.2.120-192.0.2.121"]' '{"namespaces": ["team-a"]}' >&2
  e2e_wait_for 30 "pool tiny published" published tiny
  pools_workload Deployment small team-a 3 '{"external-ip/pool": "tiny"}' >&2
  e2e_wait_for 120 "2 replicas of small Ready" is 2 ready_count team-a small
  pending=$(kubectl -n team-a get pods -l app=small -o json | jq -r '.items[] | select(.metadata.annotations["external-ip/assigned"] == null) | .metadata.name' | head -1)
  [ -n "$pending" ] || die "no pending replica of small"
  e2e_wait_for 60 "the event PoolExhausted on $pending" has_event team-a "$pending" PoolExhausted
  pass "the third replica ($pending) is pending with the event PoolExhausted: $(events_of team-a "$pending" PoolExhausted | head -1)"
  expect_eq "it is not Ready" 2 "$(ready_count team-a small)"
  kubectl -n team-a delete deployment small --wait=true >&2
  e2e_wait_for 60 "pool tiny's claims released" is 0 claim_count tiny
}

# pools_owner_step: a pod of namespace team-b naming an IP a team-a pod
# holds is refused, naming team-a, never its pod; a pod of team-a naming
# the IP pool web drew for web's pod is refused, naming that pod.
pools_owner_step() {
  local ip=192.0.2.130 msg name assigned
  pools_pool shared '["192.0.2.128/28"]' '{"namespaces": ["team-a", "team-b"]}' >&2
  e2e_wait_for 30 "pool shared published" published shared
  pools_bare_pod owner team-a "{\"external-ip/addresses\": \"$ip\"}" >&2
  check "team-a's pod holding $ip is Ready" kubectl -n team-a wait --for=condition=Ready pod/owner --timeout=90s
  pools_bare_pod other team-b "{\"external-ip/addresses\": \"$ip\"}" >&2
  e2e_wait_for 60 "the refusal's event on team-b's pod" has_event team-b other OwnedByAnotherNamespace
  msg=$(events_of team-b other OwnedByAnotherNamespace | head -1)
  expect_eq "team-b's pod is refused, naming the owning namespace" \
    "$ip: is owned by namespace team-a; a pod of namespace team-b may not hold it" "$msg"
  expect_eq "the node's IPs still route to team-a's pod alone" "$E2E_LAN_V4" "$(lan_get "$ip")"
  kubectl -n team-b delete pod other --wait=true >&2
  kubectl -n team-a delete pod owner --wait=true >&2
  read -r name assigned < <(pods_of team-a web) || true
  ip=${assigned%%,*}
  [ -n "$ip" ] || die "web's pod $name has no assigned IP"
  pools_bare_pod thief team-a "{\"external-ip/addresses\": \"$ip\"}" >&2
  e2e_wait_for 60 "the refusal's event on team-a's other pod" has_event team-a thief OwnedByAnotherPod
  expect_eq "another pod of team-a is refused, naming the pod pool web drew $ip for" \
    "$ip: was drawn from pool web for pod team-a/$name; no other pod may hold it" \
    "$(events_of team-a thief OwnedByAnotherPod | head -1)"
  expect_eq "the claim of $ip still names $name" "$name" "$(claim_owner_pod "$ip")"
  expect_eq "the LAN still reaches $ip" "$E2E_LAN_V4" "$(lan_get "$ip")"
  kubectl -n team-a delete pod thief --wait=true >&2
}

# pools_shrink_step: pool web's IPv4 range edited off the IP web's pod
# holds: the pod keeps it, reachable, with the Warning event
# ExternalIPOutsidePool, and the pool counts only its claim still inside;
# the range put back, it counts both again.
pools_shrink_step() {
  local name assigned ip want
  read -r name assigned < <(pods_of team-a web) || true
  ip=${assigned%%,*}
  [ -n "$ip" ] || die "web's pod $name has no assigned IP"
  e2e_wait_for 60 "pool web to count web's 2 IPs used" is 2 pool_used web
  pools_pool web '["192.0.2.110-192.0.2.119", "2001:db8:1::100-2001:db8:1::109"]' \
    '{"namespaceSelector": {"matchLabels": {"external-ip-e2e": "allowed"}}}' >&2
  e2e_wait_for 90 "the event ExternalIPOutsidePool on $name" has_event team-a "$name" ExternalIPOutsidePool
  want="external IP $ip lies outside the ranges of pool web (edited since): the pod keeps it until it goes, then it is released and not given again"
  expect_eq "$name is told that $ip lies outside pool web" "$want" "$(events_of team-a "$name" ExternalIPOutsidePool | head -1)"
  e2e_wait_for 60 "pool web to count 1 used" is 1 pool_used web
  pass "pool web counts 1 used: the claim of $ip, outside its ranges now, is not counted"
  check "the node still holds $ip" holds "$ip"
  expect_eq "the claim of $ip still names $name" "$name" "$(claim_owner_pod "$ip")"
  expect_eq "the LAN still reaches $ip" "$E2E_LAN_V4" "$(lan_get "$ip")"
  pools_pool web '["192.0.2.100-192.0.2.109", "2001:db8:1::100-2001:db8:1::109"]' \
    '{"namespaceSelector": {"matchLabels": {"external-ip-e2e": "allowed"}}}' >&2
  e2e_wait_for 60 "pool web to count 2 used again" is 2 pool_used web
}
pool_used() { kubectl get externalippool "$1" -o json | jq '.status.used'; }
holds() { [[ " $(e2e_holder_ips) " == *" $1 "* ]]; }

# claim_owner_pod IP: the pod the claim of IP names as its owner.
claim_owner_pod() {
  kubectl get externalipclaims -o json | jq -r --arg ip "$1" '.items[] | select(.spec.address == $ip) | .spec.owner.pod.name'
}

# pools_restart_step: the node process restarted during a rollout of web
# (scaled back to 3) loses and doubles nothing: in the end every pod of web
# holds two claimed IPs of its own, and no claim is left of pods gone.
pools_restart_step() {
  local want got
  kubectl -n team-a scale deployment web --replicas=3 >&2
  e2e_wait_for 120 "3 replicas of web Ready" is 3 ready_count team-a web
  kubectl -n team-a rollout restart deployment web >&2
  kubectl -n external-ip rollout restart ds/external-ip >&2
  check "the DaemonSet's restart rolls out" kubectl -n external-ip rollout status ds/external-ip --timeout=120s
  check "web's rollout completes" kubectl -n team-a rollout status deployment web --timeout=180s
  settled() {
    [ "$(ready_count team-a web)" = 3 ] && [ "$(pods_of team-a web | wc -l)" = 3 ] &&
      [ "$(claim_count web)" = 6 ] && [ "$(pods_of team-a web | awk 'NF == 2' | wc -l)" = 3 ]
  }
  e2e_wait_for 90 "3 pods of web, 6 claims" settled
  want=$(pods_of team-a web | awk '{print $2}' | tr ',' '\n' | sort | paste -sd' ')
  got=$(claims_of web)
  expect_eq "every claim of pool web is a running pod's, each pod's two its own" "$want" "$got"
  expect_eq "6 distinct IPs" 6 "$(tr ' ' '\n' <<<"$want" | sort -u | grep -c .)"
  expect_eq "the node holds exactly them" "$(e2e_sorted $want)" "$(e2e_holder_ips)"
  kubectl -n team-a delete deployment web --wait=true >&2
  e2e_wait_for 60 "pool web's claims released" is 0 claim_count web
  expect_eq "the node holds nothing" "" "$(e2e_holder_ips)"
}

# kubelet_refusals FROM TEXT: the kubelet's failed sandboxes of pods of
# Deployment late, from line FROM of its log on, whose error says TEXT, as
# the pods' names (one line per pod).
kubelet_refusals() {
  tail -n "+$1" "$T/kubelet.log" | grep -F -- "$2" | grep -o 'pod="team-a/late-[^"]*"' | sort -u
}
refusals_at_least() { [ "$(kubelet_refusals "$2" "$3" | wc -l)" -ge "$1" ]; }

# pools_apiserver_step: the API server stopped for 10 s while the kubelet
# runs pool ADDs. The node process claims for a pod when it sees it
# scheduled, so the pods' claims are made before any ADD (shown with
# their pending holders) and the ADDs need no API server: the kubelet's
# retries during the stop hold the claimed IPs, and once the server is
# back the holders are filled in, the pods annotated, and no claim is
# left but theirs. (An ADD that must make its claim answers code 11 while
# the API server is stopped: the claims recipe shows it, with cnitool.)
# The kubelet must have the pods before the API server goes, so their ADDs
# are held back first with the node process's socket moved aside (code 11:
# the node process "not reachable"); the socket is put back as the API
# server stops. The kubelet retries a failed sandbox 10 to 15 s later, so
# the stop begins 5 s after the first refusal, for the retries to fall
# inside it.
pools_apiserver_step() {
  local sock=$DATA/node.sock mark want early
  mv "$sock" "$sock.aside"
  mark=$(( $(wc -l <"$T/kubelet.log") + 1 ))
  pools_workload Deployment late team-a 2 '{"external-ip/pool": "web"}' >&2
  e2e_wait_for 60 "the kubelet's first ADDs of both pods refused (socket aside)" \
    refusals_at_least 2 "$mark" "external-ip-node is not reachable at $sock"
  pass "with the socket aside, the ADDs fail with code 11: $(tail -n "+$mark" "$T/kubelet.log" | grep -o -m1 'external-ip-node is not reachable[^"\\]*')"
  e2e_wait_for 30 "the 2 pods' 4 claims, made before any ADD" is 4 pending_count web
  early=$(pending_claims web)
  pass "before any ADD the node process claimed 4 IPs for the 2 pods, each with a pending holder on the node: $early"
  sleep 5
  e2e_kill_pid "$K8S_APISERVER_PID" 5
  mv "$sock.aside" "$sock"
  log "kube-apiserver stopped, the socket back"
  e2e_wait_for 30 "the kubelet's retried ADDs, the API server stopped, to hold the claimed IPs" \
    is "$(e2e_sorted $early)" e2e_holder_ips
  pass "with the API server stopped, the kubelet's retried ADDs hold the 4 IPs claimed for the pods"
  k8s_apiserver
  log "kube-apiserver started again"
  e2e_wait_for 120 "2 replicas of late Ready" is 2 ready_count team-a late
  e2e_wait_for 60 "the 2 pods annotated" is 2 annotated_count team-a late
  e2e_wait_for 30 "every pending holder filled in with its attachment" is 0 pending_count web
  want=$(pods_of team-a late | awk '{print $2}' | tr ',' '\n' | sort | paste -sd' ')
  expect_eq "the pods got the IPs claimed for them when scheduled" "$(e2e_sorted $early)" "$(e2e_sorted $want)"
  expect_eq "pool web's claims are exactly the 2 pods' 4 IPs: none leaked" "$want" "$(claims_of web)"
  expect_eq "the node holds exactly them" "$(e2e_sorted $want)" "$(e2e_holder_ips)"
  kubectl -n team-a delete deployment late --wait=true >&2
  e2e_wait_for 60 "pool web's claims released" is 0 claim_count web
  expect_eq "the node holds nothing" "" "$(e2e_holder_ips)"
}
# pending_claims POOL: the addresses of the pool's claims that have a
# pending holder (no attachment yet: claimed when the pod was scheduled).
pending_claims() {
  kubectl get externalipclaims -l "external-ip.io/pool=$1" -o json |
    jq -r '[.items[] | select(any(.spec.holders[]?; .containerID == "")) | .spec.address] | sort | join(" ")'
}
pending_count() { pending_claims "$1" | wc -w; }
