#!/usr/bin/env bash
# Recipe: a real Prometheus (Debian's package) scrapes external-ip-node
# (`install --watch --metrics-address`) on the host namespace's uplink
# address, from the LAN namespace, with the alerts of
# deploy/kubernetes/prometheusrule.yaml loaded; PromQL through its HTTP API
# must return what the recipe did:
#   - build_info is 1 with the binary's version;
#   - a cnitool ADD holds 192.0.2.20: external_ip_held{ip} is 1, and the ADD
#     is counted (verb ADD, code 0), as is an ADD refused with code 7;
#   - periodic rounds are counted; an address removed by hand is repaired and
#     counted as kind "address";
#   - the LAN namespace takes 192.0.2.20 and talks from it: external_ip_conflict
#     {ip, mac=lan0's} is 1, conflicts_total 1, a defend round is counted, and
#     the ExternalIPConflict alert fires;
#   - DEL: the held and conflict series are gone;
#   - the node process stopped: ExternalIPUpkeepDown is pending.
#   usage: metrics.sh        (root; install-deps.sh and make build first)
#   env:   E2E_BIN, PLUGIN (its external-ip-node beside it), E2E_KEEP=1, E2E_TIMEOUT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init metrics

T=$E2E_TMP
NODE_BIN=${NODE_BIN:-$(dirname "$PLUGIN")/external-ip-node}
[ -x "$NODE_BIN" ] || die "no $NODE_BIN: run make build"
command -v prometheus >/dev/null || die "no prometheus: run install-deps.sh"
RLOG=$T/recorder.jsonl
NET=eip-bridge
IP=192.0.2.20
PORT=9477
PROM=http://127.0.0.1:9090

step "network namespaces (host, lan, pods a b)"
e2e_netns_setup
for p in a b; do
  ip netns add "e2e-pod$p-$E2E_ID"
  e2e_defer "ip netns del e2e-pod$p-$E2E_ID"
done
step_done

step "CNI bin dir + conflist (bridge-runtimeconfig.conflist)"
e2e_cni_bin "$T/cni/bin"
mkdir -p "$T/net.d"
# traffic none: this recipe is about what the node process sees, not NAT.
e2e_example_conflist bridge-runtimeconfig.conflist "$RLOG" \
  | jq '.plugins |= map(if .type == "external-ip" then . + {traffic: "none"} else . end)' >"$T/net.d/$NET.conflist"
export NETCONFPATH=$T/net.d CNI_PATH=$T/cni/bin
unset CAP_ARGS CNI_ARGS
CNITOOL=(timeout 30 nsenter --net="/run/netns/$E2E_HOST_NS" "$E2E_BIN/cnitool")
# cni VERB POD IP: cnitool for POD asking for IP (CAP_ARGS).
cni() { CAP_ARGS="{\"externalIPs\":[\"$3\"]}" "${CNITOOL[@]}" "$1" "$NET" "/run/netns/e2e-pod$2-$E2E_ID"; }
for p in a b; do e2e_defer "${CNITOOL[*]} del $NET /run/netns/e2e-pod$p-$E2E_ID"; done
step_done

step "external-ip-node install --watch --metrics-address $E2E_HOST_V4:$PORT"
NODE=$T/node
mkdir -p "$NODE/bin" "$NODE/net.d"
echo '{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}' >"$NODE/net.d/10-pods.conflist"
jq --arg dir "$E2E_EIP_DATA" '.plugins[] | select(.type == "external-ip") | . + {dataDir: $dir}' \
  "$E2E_EXAMPLES/bridge-runtimeconfig.conflist" >"$NODE/entry.json"
# nsenter execs the command: $! is the node process itself (hostns, a shell
# function, would be a subshell that a TERM leaves the process behind).
nsenter --net="/run/netns/$E2E_HOST_NS" "$NODE_BIN" install --watch --plugin-config "$NODE/entry.json" --plugin-binary "$PLUGIN" \
  --bin-dir "$NODE/bin" --conf-dir "$NODE/net.d" --reannounce-every 1s --repair-every 1s \
  --metrics-address "$E2E_HOST_V4:$PORT" 2>"$T/node.log" &
NODE_PID=$!
e2e_defer "e2e_kill_pid $NODE_PID"
e2e_wait_for 20 "metrics served on $E2E_HOST_V4:$PORT" lanns curl -sf -o /dev/null "http://$E2E_HOST_V4:$PORT/metrics"
step_done

step "prometheus (scrapes every second from the LAN namespace, with our alerts)"
# The PrometheusRule's spec is a rule file as it stands.
sed -n '/^spec:/,$p' "$E2E_REPO/deploy/kubernetes/prometheusrule.yaml" | tail -n +2 | sed 's/^  //' >"$T/rules.yaml"
require "promtool check rules (deploy/kubernetes/prometheusrule.yaml)" promtool check rules "$T/rules.yaml"
cat >"$T/prometheus.yml" <<EOF2
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$T/rules.yaml"]
scrape_configs:
  - job_name: external-ip
    static_configs: [{targets: ["$E2E_HOST_V4:$PORT"]}]
EOF2
require "promtool check config" promtool check config "$T/prometheus.yml"
nsenter --net="/run/netns/$E2E_LAN_NS" prometheus --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/prometheus" \
  --web.listen-address=127.0.0.1:9090 --log.level=warn 2>"$T/prometheus.log" &
e2e_defer "e2e_kill_pid $!"
e2e_wait_for 30 "prometheus ready" lanns curl -sf -o /dev/null "$PROM/-/ready"
step_done

# promql QUERY: the values of the result, space separated, sorted by labels.
promql() {
  lanns curl -sf --max-time 5 "$PROM/api/v1/query" --data-urlencode "query=$1" \
    | jq -r '.data.result | sort_by(.metric | tostring) | map(.value[1]) | join(" ")'
}
# expect_promql DESC QUERY WANT: the query returns WANT within 20 s (scrapes
# and rule evaluations are a second apart).
expect_promql() {
  local desc=$1 q=$2 want=$3 got t0=$SECONDS
  while got=$(promql "$q" 2>/dev/null || echo "(query failed)"); [ "$got" != "$want" ] && [ $SECONDS -lt $((t0 + 20)) ]; do
    sleep 0.5
  done
  log "   $q -> [$got] after $((SECONDS - t0))s"
  expect_eq "$desc: $q" "$want" "$got"
}

step "what the node is, what it holds, what the plugin did"
VERSION=$("$PLUGIN" version | awk '{print $2}')
expect_promql "build_info is 1 with the binary's version" "external_ip_build_info{version=\"$VERSION\"}" 1
expect_promql "the target is up" 'up{job="external-ip"}' 1
check "cnitool add a (CAP_ARGS externalIPs $IP)" cni add a "$IP"
expect_promql "the held IP's series, one holder" "external_ip_held{ip=\"$IP\",uplink=\"$E2E_UPLINK\"}" 1
expect_promql "the ADD counted as a success" 'sum(external_ip_cni_requests_total{verb="ADD",code="0"})' 1
expect_fail "cnitool add b of an IP outside allowedRanges" "allowedRanges" cni add b 203.0.113.9
expect_promql "the refused ADD counted with code 7" 'sum(external_ip_cni_requests_total{verb="ADD",code="7"})' 1
check "cnitool del b" cni del b 203.0.113.9
expect_promql "its DEL counted" 'sum(external_ip_cni_requests_total{verb="DEL",code="0"})' 1
expect_promql "periodic rounds counted" 'external_ip_announcements_total{reason="periodic"} > bool 0' 1
step_done

step "drift repaired and counted"
ip -n "$E2E_HOST_NS" addr del "$IP/32" dev "$E2E_HOLDER"
expect_promql "an address repair counted" 'external_ip_repairs_total{kind="address"} >= bool 1' 1
e2e_wait_for 10 "$IP back on $E2E_HOLDER" bash -c "ip -n $E2E_HOST_NS addr show dev $E2E_HOLDER | grep -q ' $IP/'"
step_done

step "a rogue host on the LAN takes $IP"
ROGUE_MAC=$(ip -n "$E2E_LAN_NS" -j link show dev lan0 | jq -r '.[0].address')
ip -n "$E2E_LAN_NS" addr add "$IP/32" dev lan0
ip -n "$E2E_LAN_NS" neigh flush dev lan0
# Talking from the IP, it asks for the node's MAC: "sender $IP is at ROGUE_MAC".
p=(busybox ping -c3 -W1)
if command -v ping >/dev/null && ping -V >/dev/null 2>&1; then p=(ping -n -c3 -W1 -i 0.3); fi
lanns "${p[@]}" -I "$IP" "$E2E_HOST_V4" >/dev/null 2>&1 || true
expect_promql "the conflict series names the rogue's MAC" "external_ip_conflict{ip=\"$IP\",mac=\"$ROGUE_MAC\"}" 1
expect_promql "one conflict episode" 'external_ip_conflicts_total' 1
expect_promql "one defend round" 'external_ip_announcements_total{reason="defend"}' 1
expect_promql "the ExternalIPConflict alert fires" 'ALERTS{alertname="ExternalIPConflict",alertstate="firing"}' 1
check "the node process logged the episode once, with both MACs" \
  bash -c "[ \$(grep -c 'claims a held IP' '$T/node.log') = 1 ] && grep 'claims a held IP' '$T/node.log' | grep -q '$ROGUE_MAC'"
ip -n "$E2E_LAN_NS" addr del "$IP/32" dev lan0
step_done

step "release: the series go with the IP"
check "cnitool del a" cni del a "$IP"
expect_promql "no held series for $IP" "count(external_ip_held{ip=\"$IP\"})" ""
expect_promql "no conflict series for $IP" "count(external_ip_conflict{ip=\"$IP\"})" ""
step_done

step "every alert rule loaded and healthy"
rules=$(lanns curl -sf "$PROM/api/v1/rules" | jq -r '[.data.groups[].rules[] | "\(.name)=\(.health)"] | sort | join(" ")')
expect_eq "the five alerts, evaluated without error" \
  "ExternalIPCNIFailures=ok ExternalIPConflict=ok ExternalIPPoolNearlyFull=ok ExternalIPRepairsRecurring=ok ExternalIPUpkeepDown=ok" "$rules"
step_done

step "the node process stops"
e2e_kill_pid "$NODE_PID"
check "it stopped on SIGTERM, saying so" grep -q '"stopping; external-ip stays installed' "$T/node.log"
expect_promql "ExternalIPUpkeepDown is pending" 'ALERTS{alertname="ExternalIPUpkeepDown",alertstate="pending"}' 1
step_done
