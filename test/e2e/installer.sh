#!/usr/bin/env bash
# Recipe: the installer image (make image) on a node, as the DaemonSet in
# deploy/kubernetes runs it, with bind mounts standing in for the node's
# directories.
#  1. podman runs the image (host network, only NET_ADMIN and NET_RAW,
#     read-only root) on a conf dir holding a single-plugin bridge .conf: the
#     readiness probe passes; the .conf became a .conflist with external-ip
#     last; the primary rewriting its .conf is re-chained within a second;
#     stopping the container leaves everything installed; `uninstall` (the
#     image again) restores the conf dir byte for byte and removes the binary.
#  2. containerd's CRI with a bridge + host-local primary in its conf dir and
#     a bin dir without external-ip: only the installer adds it. A pod with
#     the annotation gets its external IP, reachable from the LAN namespace;
#     the installer's upkeep re-announces it (--reannounce-every) and puts it
#     back after it is removed by hand (--repair-every). `uninstall` while
#     the pod holds its IP exits 1 and leaves external-ip chained, so that
#     the pod's DEL (containerd runs the networks loaded then) releases it.
#     Once it has, `uninstall` from the image, without CAP_NET_ADMIN,
#     restores the conf dir and keeps the binary for the holder it cannot
#     remove; the command it prints, run as root on the node, removes both.
#   usage: installer.sh     (root; install-deps.sh and make image first)
#   env:   E2E_BIN, PLUGIN, IMAGE_TAR (default bin/external-ip-image.tar),
#          E2E_KEEP=1, E2E_TIMEOUT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init installer

T=$E2E_TMP
IMAGE_TAR=${IMAGE_TAR:-$E2E_REPO/bin/external-ip-image.tar}
[ -f "$IMAGE_TAR" ] || die "no image archive $IMAGE_TAR: run make image"
NODE=$T/node                       # the node's /opt/cni/bin, /etc/cni/net.d, plugin entry
BIN=$NODE/opt/cni/bin CONF=$NODE/etc/cni/net.d PLUGIN_DIR=$NODE/etc/external-ip
V4=192.0.2.20
mkdir -p "$BIN" "$CONF" "$PLUGIN_DIR" "$T/podman-net" "$E2E_EIP_DATA"

step "network namespaces"
e2e_netns_setup
step_done

step "podman + the image (podman load)"
e2e_podman_setup "$BIN" "$T/podman-net" none
require "podman load of $IMAGE_TAR" "${PODMAN[@]}" load --quiet -i "$IMAGE_TAR"
IMAGE=$(sed -n 's/^Loaded image: //p' <<<"$E2E_OUT" | tail -1)
expect_eq "the image's version label is what the binary reports" \
  "$("$PLUGIN" version | awk '{print $2}')" \
  "$("${PODMAN[@]}" image inspect --format '{{ index .Labels "org.opencontainers.image.version" }}' "$IMAGE")"
step_done

# installer NAME ARGS...: the image as the DaemonSet runs it (deploy/kubernetes/daemonset.yaml).
MOUNTS=(-v "$BIN:/host/opt/cni/bin" -v "$CONF:/host/etc/cni/net.d" -v "$E2E_EIP_DATA:$E2E_EIP_DATA"
        -v "$PLUGIN_DIR:/etc/external-ip:ro")
DIRS=(--bin-dir=/host/opt/cni/bin --conf-dir=/host/etc/cni/net.d)
installer() {
  local name=$1; shift
  "${PODMAN[@]}" run -d --name "$name" --network host --cap-drop all --cap-add NET_ADMIN,NET_RAW --read-only \
    "${MOUNTS[@]}" "$IMAGE" install --watch --plugin-config=/etc/external-ip/plugin.json "${DIRS[@]}" "$@"
}
ready() { "${PODMAN[@]}" exec "$1" /external-ip install --check --plugin-config=/etc/external-ip/plugin.json "${DIRS[@]}"; }
types() { jq -r '[.plugins[].type] | join(" ")' "$1"; }
# entry FILE: the plugin entry of an example conflist, with our dataDir and log.
entry() {
  jq --arg dir "$E2E_EIP_DATA" --arg log "$E2E_EIP_LOG" \
    '.plugins[] | select(.type == "external-ip") | . + {dataDir: $dir, logFile: $log}' "$E2E_EXAMPLES/$1"
}

step "1. install on a single-plugin .conf"
entry containerd-annotation.conflist >"$PLUGIN_DIR/plugin.json"
cat >"$CONF/10-bridge.conf" <<'EOF2'
{ "cniVersion": "1.0.0", "name": "node-net", "type": "bridge", "bridge": "cni9",
  "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.99.0.0/16" }]] } }
EOF2
chmod 0640 "$CONF/10-bridge.conf"
touch -d '2020-01-02 03:04:05' "$CONF/10-bridge.conf"
require "the installer container starts" installer eip-1
e2e_wait_for 20 "the readiness probe (install --check)" ready eip-1
pass "the readiness probe passes"
check "the binary in the bin dir is the image's" cmp "$BIN/external-ip" "$PLUGIN"
expect_eq "10-bridge.conf is now 10-bridge.conflist alone" "10-bridge.conflist" "$(ls "$CONF")"
expect_eq "its plugins: the bridge, then external-ip" "bridge external-ip" "$(types "$CONF/10-bridge.conflist")"
expect_eq "it keeps the .conf's mode" 640 "$(stat -c %a "$CONF/10-bridge.conflist")"
step_done

step "1. the primary rewrites its .conf"
sed 's/cni9/cni8/' "$CONF/10-bridge.conflist" | jq '.plugins[0] + {cniVersion, name}' >"$T/primary-v2.conf"
cp -p "$T/primary-v2.conf" "$CONF/.10-bridge.new" && mv "$CONF/.10-bridge.new" "$CONF/10-bridge.conf"
t0=$(date +%s.%N)
rechained() { [ ! -e "$CONF/10-bridge.conf" ] && grep -q cni8 "$CONF/10-bridge.conflist" && [ "$(types "$CONF/10-bridge.conflist")" = "bridge external-ip" ]; }
e2e_wait_for 10 "the rewrite re-chained" rechained
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
if awk -v t="$took" 'BEGIN{exit !(t < 1.0)}'; then pass "the rewritten .conf was re-chained in ${took}s (within a second)"
else fail "the rewritten .conf was re-chained in ${took}s, not within a second"; fi
check "the installer logged both chainings" bash -c "[ \$(${PODMAN[*]} logs eip-1 2>&1 | grep -c 'chained external-ip') -ge 2 ]"
step_done

step "1. stop the container: leaving does not uninstall"
check "podman stop (SIGTERM)" "${PODMAN[@]}" stop --time 10 eip-1
expect_eq "the installer exited 0" 0 "$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' eip-1)"
check "binary and chain still in place" "$PLUGIN" install --check --plugin-config="$PLUGIN_DIR/plugin.json" --bin-dir="$BIN" --conf-dir="$CONF"
"${PODMAN[@]}" rm eip-1 >/dev/null
step_done

step "1. uninstall (the image)"
check "external-ip uninstall" "${PODMAN[@]}" run --rm --network host --cap-drop all "${MOUNTS[@]}" "$IMAGE" uninstall "${DIRS[@]}"
expect_eq "the conf dir holds the primary's file alone" "10-bridge.conf" "$(ls -A "$CONF")"
check "10-bridge.conf is the primary's last version byte for byte" cmp "$T/primary-v2.conf" "$CONF/10-bridge.conf"
expect_eq "with its mode" "$(stat -c %a "$T/primary-v2.conf")" "$(stat -c %a "$CONF/10-bridge.conf")"
expect_eq "the bin dir is empty again" "" "$(ls -A "$BIN")"
step_done

step "2. containerd with a bridge + host-local primary; only the installer adds external-ip"
rm -f "$CONF"/*
jq '.plugins |= map(select(.type != "external-ip"))' "$E2E_EXAMPLES/containerd-annotation.conflist" >"$CONF/10-containerd-net.conflist"
cp -p "$CONF/10-containerd-net.conflist" "$T/primary.conflist"
for p in bridge host-local loopback; do cp "$E2E_BIN/$p" "$BIN/$p"; done
e2e_rootfs "$T/rootfs"
e2e_oci_archive "$T/rootfs" localhost/e2e/busybox:latest "$T/busybox.oci.tar"
e2e_containerd_start "$BIN" "$CONF" localhost/e2e/busybox:latest
"${CTR[@]}" images import --no-unpack=false "$T/busybox.oci.tar" >&2
require "the installer container starts, with upkeep every second" \
  installer eip-2 --data-dir="$E2E_EIP_DATA" --reannounce-every=1s --repair-every=1s
e2e_wait_for 20 "the readiness probe" ready eip-2
cri_chained() { "${CRICTL[@]}" info | jq -e '[.cniconfig.Networks[].Config.Plugins[].Network.type] | index("external-ip")'; }
e2e_wait_for 20 "containerd to load the chained config" cri_chained
pass "containerd loaded the config the installer chained"
step_done

step "2. a pod with the annotation external-ip/addresses=$V4"
lanns tcpdump -i lan0 -n -U -w "$T/lan.pcap" "arp src host $V4" 2>"$T/tcpdump.log" &
e2e_defer "kill $!"
e2e_wait_for 10 "tcpdump listening" grep -q "listening on" "$T/tcpdump.log"
cat >"$T/pod.json" <<EOF2
{ "metadata": {"name": "eip-pod", "namespace": "default", "uid": "e2e-uid-$E2E_ID", "attempt": 0},
  "log_directory": "$T/pods", "annotations": {"external-ip/addresses": "$V4"},
  "linux": {"cgroup_parent": "$E2E_CGROUP_PARENT"} }
EOF2
mkdir -p "$T/pods"
require "crictl runp of a pod with the annotation" "${CRICTL[@]}" runp "$T/pod.json"
POD=$E2E_OUT
expect_holder "pod running" "$V4"
check "ping $V4 from the LAN namespace" e2e_ping "$E2E_LAN_NS" "$V4"
# ADD sends 3 rounds (2 frames each); the upkeep adds one a second.
arp_frames() { tcpdump -n -r "$T/lan.pcap" 2>/dev/null | wc -l; }
e2e_wait_for 15 "re-announcements beyond ADD's three rounds" bash -c "[ \$(tcpdump -n -r '$T/lan.pcap' 2>/dev/null | wc -l) -ge 12 ]"
pass "the LAN saw $(arp_frames) ARP frames for $V4: the installer re-announces it"
step_done

step "2. drift: $V4's route through $E2E_HOLDER (route mode, the default) removed by hand"
ip -n "$E2E_HOST_NS" route del "$V4/32" dev "$E2E_HOLDER"
e2e_wait_for 15 "the upkeep to repair the holder" bash -c "ip -n $E2E_HOST_NS -4 route show dev $E2E_HOLDER proto 200 | grep -q '^$V4 '"
pass "the upkeep put $V4 back"
check "the installer logged what it fixed" bash -c "${PODMAN[*]} logs eip-2 2>&1 | grep 'repaired drift' | grep -q '$V4'"
check "ping $V4 from the LAN namespace after the repair" e2e_ping "$E2E_LAN_NS" "$V4"
expect_status "after the repair" "{\"$V4\": [\"containerd-net/$POD/eth0\"]}"
step_done

step "2. stop the installer; uninstall while the pod holds $V4 refuses"
"${PODMAN[@]}" rm --force --time 10 eip-2 >/dev/null
# containerd runs the pod's DEL with the networks it has loaded then: the
# entry must stay chained until that DEL has run.
expect_fail "uninstall exits 1 naming the holder and what to do" "pods still hold external IPs: holder $E2E_HOLDER: 1 attachments.*delete those pods, then run /host/opt/cni/bin/external-ip uninstall --bin-dir /host/opt/cni/bin --conf-dir /host/etc/cni/net.d again" \
  "${PODMAN[@]}" run --rm --network host --cap-drop all "${MOUNTS[@]}" "$IMAGE" uninstall "${DIRS[@]}"
expect_eq "external-ip is still chained" "bridge external-ip" "$(types "$CONF/10-containerd-net.conflist")"
check "and the binary the DEL runs is still there" cmp "$BIN/external-ip" "$PLUGIN"
step_done

step "2. remove the pod: its DEL releases $V4; then uninstall"
check "crictl stopp + rmp" bash -c "${CRICTL[*]} stopp $POD && ${CRICTL[*]} rmp $POD"
expect_holder "after rmp"
# Without CAP_NET_ADMIN the image cannot remove the empty holder: it keeps
# the binary for that and prints the command that finishes.
require "external-ip uninstall" "${PODMAN[@]}" run --rm --network host --cap-drop all "${MOUNTS[@]}" "$IMAGE" uninstall "${DIRS[@]}"
said=$E2E_OUT
check "it says it keeps the holder for lack of CAP_NET_ADMIN" grep -q "needs CAP_NET_ADMIN" <<<"$said"
check "and the command that finishes" grep -q "run /host/opt/cni/bin/external-ip uninstall --bin-dir /host/opt/cni/bin --conf-dir /host/etc/cni/net.d to finish" <<<"$said"
check "the primary's conflist is back byte for byte" cmp "$T/primary.conflist" "$CONF/10-containerd-net.conflist"
check "the binary that command runs is kept" cmp "$BIN/external-ip" "$PLUGIN"
check "that command, as root on the node (the node's paths)" hostns "$BIN/external-ip" uninstall --bin-dir "$BIN" --conf-dir "$CONF"
expect_eq "nothing else in the conf dir" "10-containerd-net.conflist" "$(ls -A "$CONF")"
expect_eq "external-ip is gone from the bin dir" "bridge host-local loopback" "$(ls -A "$BIN" | paste -sd' ' -)"
expect_eq "and the holder $E2E_HOLDER from the node" "" "$(ip -n "$E2E_HOST_NS" -br link show dev "$E2E_HOLDER" 2>/dev/null)"
step_done
