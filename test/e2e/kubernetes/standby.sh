# shellcheck shell=bash
# The standby step of test/e2e/kubernetes.sh, on its one node: source after
# pools.sh (it runs the pools' test server, in a namespace pool shared
# admits).

# entry_standby: the chained entry's standby key (null when absent).
entry_standby() { jq -c '.plugins[-1] | select(.type == "external-ip") | .standby' "$CONF/$PRIMARY"; }
# cri_standby: the standby key of our entry in the chain containerd has
# loaded, which the kubelet's ADDs run with (null when absent).
cri_standby() {
  "${CRICTL[@]}" info | jq -c '[.cniconfig.Networks[].Config.Plugins[] | select(.Network.type == "external-ip")
    | (.Source // (.Bytes | @base64d)) | fromjson | .standby] | first'
}
# chained_as STANDBY RANGES: the chained entry has that standby key and
# those allowedRanges, and containerd has loaded it.
chained_as() { [ "$(entry_standby)" = "$1" ] && ranges_are "$2" && [ "$(cri_standby)" = "$1" ]; }

# holders_of IP: "ACTIVE STANDBY", the node's active and standby holders of
# IP, as `external-ip status --json` in the node process's pod shows them.
holders_of() {
  kubectl -n external-ip exec ds/external-ip -- /external-ip status --json --data-dir "$DATA" |
    jq -r --arg ip "$1" '[.[].ips[] | select(.ip == $ip)] | "\([.[].holders[]] | length) \([.[].standby[]?] | length)"'
}

# standby_step: with "standby": true in the plugin entry, a Deployment of 2
# replicas with one explicit IP (in pool shared, which admits team-a) runs
# both replicas on the one node as co-holders, both active: a replica
# stands by only when another node answers the conflict probe, and a node
# does not probe an IP it already holds. The LAN reaches the IP; the
# Deployment deleted, the IP and its claim are gone. The entry is then as
# before the step, for the steps after it.
standby_step() {
  local ip=192.0.2.131 ranges
  ranges=$(entry_ranges)
  # standby needs a conflict probe above 0s: the default, named here.
  k8s_configmap "$ranges" '"standby": true, "conflictProbe": "150ms"' | kubectl apply -f - >&2
  e2e_wait_for 120 "the entry with standby: true chained and loaded" chained_as true "$ranges"
  pass "the ConfigMap's entry with \"standby\": true is chained, and containerd runs it"
  pools_workload Deployment pair team-a 2 "{\"external-ip/addresses\": \"$ip\"}" >&2
  e2e_wait_for 120 "2 replicas of pair Ready" is 2 ready_count team-a pair
  kubectl -n external-ip exec ds/external-ip -- /external-ip status --data-dir "$DATA" >&2 || true
  expect_eq "external-ip status: the 2 replicas hold $ip as co-holders, both active, none in standby" "2 0" "$(holders_of "$ip")"
  expect_eq "the LAN reaches the pair at $ip, and the pod sees the client's address" "$E2E_LAN_V4" "$(lan_get "$ip")"
  kubectl -n team-a delete deployment pair --wait=true >&2
  ip_gone() { [[ " $(e2e_holder_ips) " != *" $ip "* ]]; }
  e2e_wait_for 60 "$ip gone from the node" ip_gone
  pass "the Deployment deleted, $ip is gone from the node"
  claim_gone() { [[ " $(claims_of shared) " != *" $ip "* ]]; }
  e2e_wait_for 60 "the claim of $ip released" claim_gone
  pass "the Deployment deleted, the claim of $ip is released"
  k8s_configmap "$ranges" | kubectl apply -f - >&2
  e2e_wait_for 120 "the entry without standby chained and loaded again" chained_as null "$ranges"
  pass "the plugin entry is as before the step (no standby key, allowedRanges $ranges)"
}
