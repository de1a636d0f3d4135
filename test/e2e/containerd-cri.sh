#!/usr/bin/env bash
# Recipe: containerd 1.6 (CRI plugin) + crictl, as on a Kubernetes node,
# inside the "host" netns, with conflist-examples/containerd-annotation.conflist.
# A pod sandbox with the annotation
#   external-ip/addresses: "192.0.2.10,2001:db8:1::10"
# and a busybox container in it. Asserts, while the pod runs: both IPs on
# eip0, the IPv6 proxy neighbour entry on uplink0, `external-ip status
# --json` naming the sandbox as holder with no drift; on the LAN side
# (tcpdump on lan0) one conflict probe per IP, then 3 announcement rounds
# (the default), and the LAN's neighbour caches filled by them; both IPs
# answering ping from the LAN namespace, and the pod's HTTP server (busybox
# httpd) answering the LAN at both external IPs (traffic "both"). After `crictl stopp` (DEL with the netns) and `crictl rmp`
# (DEL again, empty CNI_NETNS, no prevResult): both IPs gone, no holders,
# no drift, no answer from the LAN.
#   usage: containerd-cri.sh        (root; run install-deps.sh and make build first)
#   env:   E2E_BIN, PLUGIN, E2E_KEEP=1, E2E_TIMEOUT, E2E_HOLD=N (see README.md)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init containerd-cri

T=$E2E_TMP
RLOG=$T/recorder.jsonl
CNI_BIN=$T/cni/bin
CNI_CONF=$T/cni/net.d
NET=containerd-net            # the example's name
V4=192.0.2.10 V6=2001:db8:1::10
mkdir -p "$CNI_CONF" "$T/pods"

step "network namespaces"
e2e_netns_setup
step_done

step "CNI bin dir + conflist (containerd-annotation.conflist)"
e2e_cni_bin "$CNI_BIN"
e2e_example_conflist containerd-annotation.conflist "$RLOG" >"$CNI_CONF/10-$NET.conflist"
jq -c . "$CNI_CONF/10-$NET.conflist" >&2
step_done

step "image: busybox rootfs -> OCI archive (buildah)"
e2e_rootfs "$T/rootfs"
e2e_oci_archive "$T/rootfs" localhost/e2e/busybox:latest "$T/busybox.oci.tar"
step_done

step "containerd config + start"
e2e_containerd_start "$CNI_BIN" "$CNI_CONF" localhost/e2e/busybox:latest
step_done

step "import image, CRI network ready"
"${CTR[@]}" images import --no-unpack=false "$T/busybox.oci.tar" >&2
check "crictl info: NetworkReady with the conflist loaded" \
  bash -c "${CRICTL[*]} info | jq -e '.status.conditions[] | select(.type == \"NetworkReady\") | .status'"
step_done

step "capture on the LAN side (tcpdump on lan0)"
lanns tcpdump -i lan0 -n -U -w "$T/lan.pcap" 'arp or icmp6' 2>"$T/tcpdump.log" &
TCPDUMP_PID=$!
e2e_defer "kill $TCPDUMP_PID"
e2e_wait_for 10 "tcpdump listening" grep -q "listening on" "$T/tcpdump.log"
# lan_frames KIND: how many announcement frames of KIND the LAN has seen.
lan_frames() {
  case $1 in
    arp) tcpdump -n -r "$T/lan.pcap" "arp src host $V4" 2>/dev/null | wc -l ;;
    na)  tcpdump -n -v -r "$T/lan.pcap" 'icmp6 and ip6[40] == 136' 2>/dev/null \
           | grep "tgt is $V6," | grep -vc solicited ;;
    arp-probe) tcpdump -n -r "$T/lan.pcap" "arp src host 0.0.0.0 and arp dst host $V4" 2>/dev/null | wc -l ;;
    dad-ns) tcpdump -n -r "$T/lan.pcap" "ip6 src :: and icmp6 and ip6[40] == 135" 2>/dev/null \
           | grep -c "who has $V6," ;;
  esac
}
step_done

step "runp: pod sandbox with the annotation external-ip/addresses=$V4,$V6"
cat >"$T/pod.json" <<EOF
{
  "metadata": {"name": "e2e-pod", "namespace": "default", "uid": "e2e-uid-$E2E_ID", "attempt": 0},
  "hostname": "e2e-pod",
  "log_directory": "$T/pods",
  "annotations": {"external-ip/addresses": "$V4,$V6", "other/annotation": "x"},
  "labels": {"app": "e2e"},
  "linux": {"cgroup_parent": "$E2E_CGROUP_PARENT"}
}
EOF
require "crictl runp of a pod with the annotation succeeds" "${CRICTL[@]}" runp "$T/pod.json"
POD=$E2E_OUT
log "pod $POD"
expect_eq "the pod IP is the bridge's (result passed through unchanged)" \
  "$(jq -r --arg c "$POD" 'select(.command == "ADD" and .containerID == $c) | .stdin.prevResult.ips[0].address | split("/")[0]' "$RLOG")" \
  "$("${CRICTL[@]}" inspectp "$POD" | jq -r .status.network.ip)"
step_done

step "container in the pod (busybox)"
cat >"$T/ctr.json" <<EOF
{
  "metadata": {"name": "sleeper"},
  "image": {"image": "localhost/e2e/busybox:latest"},
  "command": ["/bin/sh", "-c", "mkdir -p /www && echo served-by-e2e-pod >/www/index.html && exec httpd -f -p 8080 -h /www"],
  "log_path": "sleeper.log",
  "linux": {}
}
EOF
CID=$("${CRICTL[@]}" create "$POD" "$T/ctr.json" "$T/pod.json")
"${CRICTL[@]}" start "$CID" >/dev/null
e2e_wait_for 20 "container running" bash -c "${CRICTL[*]} inspect $CID | jq -e '.status.state == \"CONTAINER_RUNNING\"'"
step_done

step "while the pod runs"
expect_holder "pod running" "$V4" "$V6"
expect_status "pod running" "{\"$V4\": [\"$NET/$POD/eth0\"], \"$V6\": [\"$NET/$POD/eth0\"]}"
# Before any traffic to the IPs: the LAN knows them from the announcements
# (gratuitous ARP, unsolicited NA; lan0 accepts untracked ones).
check "the LAN learned $V4 -> uplink MAC from the ARP announcement" e2e_lan_learned "$V4"
check "the LAN learned $V6 -> uplink MAC from the neighbour advertisement" e2e_lan_learned "$V6"
# announce defaults (count 3, interval 1.1s): rounds 2 and 3 come from the
# plugin's detached announcer after ADD returned; wait for them.
lan_rounds_done() { [ "$(lan_frames arp)" -ge 6 ] && [ "$(lan_frames na)" -ge 3 ]; }
e2e_wait_for 15 "three announcement rounds on the LAN" lan_rounds_done
# A fourth round would come one interval (1.1 s) after the third: listen for
# two intervals, so that a late child's extra round shows here too.
sleep 2.3
# conflictProbe is the examples' default (150 ms): the LAN is probed before
# an IP first goes on the holder.
n=$(lan_frames arp-probe)
if [ "$n" -ge 1 ]; then pass "the LAN saw an ARP probe (sender 0.0.0.0) for $V4 ($n)"
else fail "the LAN saw no ARP probe (sender 0.0.0.0) for $V4"; fi
n=$(lan_frames dad-ns)
if [ "$n" -ge 1 ]; then pass "the LAN saw a duplicate-address probe (NS from ::) for $V6 ($n)"
else fail "the LAN saw no duplicate-address probe (NS from ::) for $V6"; fi
expect_eq "the LAN saw 3 rounds of ARP announcements for $V4 (request + reply each)" 6 "$(lan_frames arp)"
expect_eq "the LAN saw 3 unsolicited neighbour advertisements for $V6" 3 "$(lan_frames na)"
kill "$TCPDUMP_PID" 2>/dev/null || true
tcpdump -n -r "$T/lan.pcap" 2>/dev/null | sed 's/^/    lan0: /' >&2
check "ping $V4 from the LAN namespace" e2e_ping "$E2E_LAN_NS" "$V4"
check "ping $V6 from the LAN namespace" e2e_ping "$E2E_LAN_NS" "$V6"
# lan_get IP: the pod's page, fetched from the LAN at IP:8080 (bash /dev/tcp).
lan_get() {
  lanns timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/8080" && printf "GET / HTTP/1.0\r\n\r\n" >&3 && cat <&3' _ "$1" | grep -q served-by-e2e-pod
}
e2e_wait_for 20 "the pod's server listening" lan_get "$V4"
check "the pod serves the LAN at $V4:8080" lan_get "$V4"
check "the pod serves the LAN at [$V6]:8080" lan_get "$V6"
e2e_show "pod running"
[ -z "${E2E_HOLD:-}" ] || { log "holding ${E2E_HOLD}s (E2E_HOLD)"; sleep "$E2E_HOLD" & wait $!; }
step_done

step "stop + remove"
"${CRICTL[@]}" stop --timeout 0 "$CID" >/dev/null
"${CRICTL[@]}" rm "$CID" >/dev/null
check "crictl stopp succeeds" "${CRICTL[@]}" stopp "$POD"
expect_holder "after stopp" 
check "crictl rmp succeeds" "${CRICTL[@]}" rmp "$POD"
expect_holder "after stopp + rmp"
expect_status "after stopp + rmp" '{}'
expect_eq "containerd called ADD, DEL (stopp, with netns), DEL (rmp, empty CNI_NETNS)" \
  "ADD:netns DEL:netns DEL:" \
  "$(jq -r '"\(.command):\(if .netns == "" then "" else "netns" end)"' "$RLOG" | paste -sd' ' -)"
if e2e_ping "$E2E_LAN_NS" "$V4" >/dev/null 2>&1; then fail "$V4 still answers ping from the LAN after rmp"
else pass "$V4 no longer answers ping from the LAN"; fi
if e2e_ping "$E2E_LAN_NS" "$V6" >/dev/null 2>&1; then fail "$V6 still answers ping from the LAN after rmp"
else pass "$V6 no longer answers ping from the LAN"; fi
step_done

step "recorder log (what containerd passed)"
jq -c '{command, containerID: .containerID[0:12], netns, ifname, args,
        annotations: .stdin.runtimeConfig["io.kubernetes.cri.pod-annotations"],
        prevResult: (.stdin.prevResult != null)}' "$RLOG" >&2
[ -z "${E2E_OUT_DIR:-}" ] || cp "$RLOG" "$E2E_OUT_DIR/containerd-recorder.jsonl"
step_done
