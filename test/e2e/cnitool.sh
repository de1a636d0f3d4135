#!/usr/bin/env bash
# Recipe: cnitool v1.3.1 drives conflist-examples/bridge-runtimeconfig.conflist
# (at cniVersion 1.1.0, for GC and STATUS) inside the "host" netns, against
# three "pod" netns (one attachment each; cnitool derives CNI_CONTAINERID
# from the netns path):
#   A asks with CAP_ARGS (runtimeConfig.externalIPs, capability externalIPs),
#   B and C with CNI_ARGS (EXTERNAL_IPS=...); A and B share one IPv4 IP.
# Asserts status, add, check (and a CHECK that must fail on drift, then
# `external-ip repair`), del (twice), and gc: cnitool gc DELs the attachments
# libcni still has cached (C), then calls GC with no valid attachments,
# which must drop B, whose cache entry the recipe removed (a container the
# runtime lost). After each step: the addresses on eip0, the proxy
# neighbour entries on uplink0 and `external-ip status --json` (holders, no
# drift).
#   usage: cnitool.sh               (root; run install-deps.sh and make build first)
#   env:   E2E_BIN, PLUGIN, E2E_KEEP=1, E2E_TIMEOUT (see README.md)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init cnitool

T=$E2E_TMP
RLOG=$T/recorder.jsonl
NET=eip-bridge                # the example's name
CAP_A='{"externalIPs":["192.0.2.20","2001:db8:1::20","192.0.2.30"]}'
ARGS_B='IgnoreUnknown=1;K8S_POD_NAME=b;EXTERNAL_IPS=192.0.2.21,2001:db8:1::21,192.0.2.30'
ARGS_C='EXTERNAL_IPS=192.0.2.22;IgnoreUnknown=1'   # without IgnoreUnknown, bridge refuses the key

step "network namespaces (host, lan, pods a b c)"
e2e_netns_setup
for p in a b c; do
  ip netns add "e2e-pod$p-$E2E_ID"
  e2e_defer "ip netns del e2e-pod$p-$E2E_ID"
done
step_done

step "CNI bin dir + conflist (bridge-runtimeconfig.conflist at 1.1.0)"
e2e_cni_bin "$T/cni/bin"
mkdir -p "$T/net.d"
e2e_example_conflist bridge-runtimeconfig.conflist "$RLOG" 1.1.0 >"$T/net.d/$NET.conflist"
jq -c . "$T/net.d/$NET.conflist" >&2
export NETCONFPATH=$T/net.d CNI_PATH=$T/cni/bin
unset CAP_ARGS CNI_ARGS
CNITOOL=(timeout 30 nsenter --net="/run/netns/$E2E_HOST_NS" "$E2E_BIN/cnitool")
# cnitool VERB POD: POD's own arguments (a: CAP_ARGS, b/c: CNI_ARGS).
cni() {
  local verb=$1 pod=$2 env=()
  case $pod in
    a) env=(CAP_ARGS="$CAP_A") ;;
    b) env=(CNI_ARGS="$ARGS_B") ;;
    c) env=(CNI_ARGS="$ARGS_C") ;;
  esac
  env "${env[@]}" "${CNITOOL[@]}" "$verb" "$NET" "/run/netns/e2e-pod$pod-$E2E_ID"
}
# If we stop half-way, tear the attachments down while the plugins are there.
# (DEL needs no arguments: libcni has the ADD's cached, the plugin its record.)
for p in a b c; do e2e_defer "${CNITOOL[*]} del $NET /run/netns/e2e-pod$p-$E2E_ID"; done
# cid POD: the CNI_CONTAINERID cnitool used for POD, from the recorder log.
cid() { jq -r --arg ns "/run/netns/e2e-pod$1-$E2E_ID" 'select(.command == "ADD" and .netns == $ns) | .containerID' "$RLOG" | head -n1; }
step_done

step "status before any attachment"
check "cnitool status succeeds before any ADD (holder device creatable)" "${CNITOOL[@]}" status "$NET" "/run/netns/e2e-poda-$E2E_ID"
step_done

step "add a (CAP_ARGS: runtimeConfig.externalIPs)"
require "cnitool add with CAP_ARGS succeeds" cni add a
FINAL_A=$E2E_OUT
A=$(cid a); [ -n "$A" ] || die "no ADD for pod a in the recorder log"
expect_eq "add a: the result is the bridge's, passed through unchanged" \
  "$(jq -cS 'del(.cniVersion)' <<<"$FINAL_A")" \
  "$(jq -cS --arg c "$A" 'select(.command == "ADD" and .containerID == $c) | .stdin.prevResult | del(.cniVersion)' "$RLOG")"
expect_holder "after add a" 192.0.2.20 192.0.2.30 2001:db8:1::20
expect_status "after add a" "{\"192.0.2.20\": [\"$NET/$A/eth0\"], \"192.0.2.30\": [\"$NET/$A/eth0\"], \"2001:db8:1::20\": [\"$NET/$A/eth0\"]}"
step_done

step "add b (CNI_ARGS EXTERNAL_IPS=...; shares 192.0.2.30 with a)"
require "cnitool add with CNI_ARGS succeeds" cni add b
B=$(cid b); [ -n "$B" ] || die "no ADD for pod b in the recorder log"
expect_holder "after add b" 192.0.2.20 192.0.2.21 192.0.2.30 2001:db8:1::20 2001:db8:1::21
expect_status "after add b" "{\"192.0.2.20\": [\"$NET/$A/eth0\"], \"192.0.2.21\": [\"$NET/$B/eth0\"],
  \"192.0.2.30\": [\"$NET/$A/eth0\", \"$NET/$B/eth0\"], \"2001:db8:1::20\": [\"$NET/$A/eth0\"], \"2001:db8:1::21\": [\"$NET/$B/eth0\"]}"
e2e_show "after add a, add b"
step_done

step "check, status"
check "cnitool check passes (CAP_ARGS attachment)" cni check a
check "cnitool check passes (CNI_ARGS attachment)" cni check b
check "cnitool status passes with attachments" "${CNITOOL[@]}" status "$NET" "/run/netns/e2e-poda-$E2E_ID"
step_done

step "drift: an IP's route (route mode, the default) removed by hand; check fails, status shows it, repair"
ip -n "$E2E_HOST_NS" route del 192.0.2.20/32 dev "$E2E_HOLDER"
expect_fail "cnitool check fails when one of the attachment's IPs is no longer routed to $E2E_HOLDER" "192\.0\.2\.20" cni check a
if e2e_status | jq -e '[.[].drift[]] | any(test("192.0.2.20"))' >/dev/null; then
  pass "external-ip status --json reports the removed route as drift"
else
  fail "external-ip status --json does not report 192.0.2.20 as drift: $(e2e_status 2>&1 | jq -c '[.[].drift[]]')"
fi
check "external-ip repair succeeds" hostns "$PLUGIN" repair --data-dir "$E2E_EIP_DATA"
check "cnitool check passes again after repair" cni check a
expect_holder "after repair" 192.0.2.20 192.0.2.21 192.0.2.30 2001:db8:1::20 2001:db8:1::21
step_done

step "route mode (the default) keeps working with arp_ignore 1 (IPVS strictARP); status fails while IPv4 forwarding is off"
hostns sysctl -qw "net.ipv4.conf.$E2E_UPLINK.arp_ignore=1"
check "cnitool status passes with net.ipv4.conf.$E2E_UPLINK.arp_ignore=1 (proxy ARP answers for routes)" \
  "${CNITOOL[@]}" status "$NET" "/run/netns/e2e-poda-$E2E_ID"
hostns sysctl -qw "net.ipv4.conf.$E2E_UPLINK.arp_ignore=0"
hostns sysctl -qw "net.ipv4.conf.$E2E_UPLINK.forwarding=0"
expect_fail "cnitool status fails with net.ipv4.conf.$E2E_UPLINK.forwarding=0, naming it" \
  "forwarding" "${CNITOOL[@]}" status "$NET" "/run/netns/e2e-poda-$E2E_ID"
hostns sysctl -qw "net.ipv4.conf.$E2E_UPLINK.forwarding=1"
check "cnitool status passes again with forwarding on" "${CNITOOL[@]}" status "$NET" "/run/netns/e2e-poda-$E2E_ID"
step_done

step "del a, twice"
check "cnitool del (CAP_ARGS attachment) succeeds" cni del a
expect_holder "after del a: a's IPs gone, the shared one stays for b" 192.0.2.21 192.0.2.30 2001:db8:1::21
expect_status "after del a" "{\"192.0.2.21\": [\"$NET/$B/eth0\"], \"192.0.2.30\": [\"$NET/$B/eth0\"], \"2001:db8:1::21\": [\"$NET/$B/eth0\"]}"
check "a second cnitool del of the same attachment succeeds" cni del a
expect_holder "after the second del a" 192.0.2.21 192.0.2.30 2001:db8:1::21
step_done

step "gc: c still cached (libcni DELs it), b's cache entry removed (GC must drop it)"
require "cnitool add c (CNI_ARGS) succeeds" cni add c
C=$(cid c)
expect_holder "after add c" 192.0.2.21 192.0.2.22 192.0.2.30 2001:db8:1::21
CACHE_B=/var/lib/cni/results/$NET-$B-eth0
[ -f "$CACHE_B" ] || die "no libcni cache entry $CACHE_B for b (ls: $(ls /var/lib/cni/results 2>&1 | tr '\n' ' '))"
rm -f "$CACHE_B"
GC_FROM=$(wc -l <"$RLOG")
check "cnitool gc succeeds" "${CNITOOL[@]}" gc "$NET" "/run/netns/e2e-poda-$E2E_ID"
expect_eq "gc: libcni called DEL for c only (cached), then GC with no valid attachments" \
  "DEL:$C GC:null" \
  "$(tail -n +$((GC_FROM + 1)) "$RLOG" | jq -r '"\(.command):\(if .command == "GC" then .stdin["cni.dev/valid-attachments"] else .containerID end)"' | paste -sd' ' -)"
expect_holder "after gc: the holder is empty"
expect_status "after gc" '{}'
check "cnitool status passes after gc" "${CNITOOL[@]}" status "$NET" "/run/netns/e2e-poda-$E2E_ID"
if grep -q '"msg":"collected"' "$E2E_EIP_LOG" && grep '"msg":"collected"' "$E2E_EIP_LOG" | grep -q "$B"; then
  pass "the plugin's log has a \"collected\" line for b"
else
  fail "the plugin's log has no \"collected\" line naming b ($B)"
fi
step_done

step "recorder log (what cnitool/libcni passed)"
jq -c '{command, containerID, netns, args, runtimeConfig: .stdin.runtimeConfig,
        validAttachments: .stdin["cni.dev/valid-attachments"]}' "$RLOG" >&2
[ -z "${E2E_OUT_DIR:-}" ] || cp "$RLOG" "$E2E_OUT_DIR/cnitool-recorder.jsonl"
step_done
