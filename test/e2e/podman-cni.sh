#!/usr/bin/env bash
# Recipe: podman 4.3 with its CNI network backend, inside the "host" netns,
# with conflist-examples/podman-cniargs.conflist. podman passes its own
# CNI_ARGS environment variable to every plugin, so
#   CNI_ARGS="EXTERNAL_IPS=192.0.2.11,2001:db8:1::11" podman run -d --network podman-eip ...
# asks for the IPs. Asserts: both IPs on eip0 (and the IPv6 proxy entry)
# while the container runs, held by that container in `external-ip status
# --json` with no drift; all gone after `podman rm -f`, even when rm runs
# with other CNI_ARGS (DEL releases what the plugin recorded).
# No image: `podman run --rootfs [OPTS] DIR CMD` (--rootfs is a boolean).
#   usage: podman-cni.sh            (root; run install-deps.sh and make build first)
#   env:   E2E_BIN, PLUGIN, E2E_KEEP=1, E2E_TIMEOUT (see README.md)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init podman-cni

T=$E2E_TMP
RLOG=$T/recorder.jsonl
CNI_BIN=$T/cni/bin
CNI_CONF=$T/cni/net.d
NET=podman-eip                # the example's name
V4=192.0.2.11 V6=2001:db8:1::11
mkdir -p "$CNI_CONF"

step "network namespaces"
e2e_netns_setup
step_done

step "CNI bin dir + conflist (podman-cniargs.conflist) + containers.conf"
e2e_cni_bin "$CNI_BIN"
e2e_example_conflist podman-cniargs.conflist "$RLOG" >"$CNI_CONF/$NET.conflist"
jq -c . "$CNI_CONF/$NET.conflist" >&2
e2e_rootfs "$T/rootfs"
e2e_podman_setup "$CNI_BIN" "$CNI_CONF" "$NET"
step_done

step "podman sees the network on the CNI backend"
check "podman info: network backend is cni" \
  bash -c "${PODMAN[*]} info --format '{{.Host.NetworkBackend}}' | grep -qx cni"
check "podman network inspect $NET" "${PODMAN[@]}" network inspect "$NET"
step_done

step "CNI_ARGS=EXTERNAL_IPS=$V4,$V6 podman run -d"
require "podman run -d with CNI_ARGS=EXTERNAL_IPS=$V4,$V6 succeeds" \
  env CNI_ARGS="EXTERNAL_IPS=$V4,$V6" "${PODMAN[@]}" run -d --cgroup-parent "$E2E_CGROUP_PARENT" \
    --network "$NET" --name e2e-eip --rootfs "$T/rootfs" /bin/sleep 3600
CID=$E2E_OUT
log "container $CID"
check "the container is running" \
  bash -c "${PODMAN[*]} inspect --format '{{.State.Running}}' $CID | grep -qx true"
expect_eq "the container IP is the bridge's (result passed through unchanged)" \
  "$(jq -r --arg c "$CID" 'select(.command == "ADD" and .containerID == $c) | .stdin.prevResult.ips[0].address | split("/")[0]' "$RLOG")" \
  "$("${PODMAN[@]}" inspect "$CID" | jq -r --arg n "$NET" '.[0].NetworkSettings.Networks[$n].IPAddress')"
expect_holder "container running" "$V4" "$V6"
expect_status "container running" "{\"$V4\": [\"$NET/$CID/eth0\"], \"$V6\": [\"$NET/$CID/eth0\"]}"
e2e_show "container running"
step_done

step "podman rm -f (with other CNI_ARGS: DEL works from the plugin's record)"
check "podman rm -f succeeds" \
  env CNI_ARGS="EXTERNAL_IPS=192.0.2.99" "${PODMAN[@]}" rm -f --time 0 "$CID"
expect_holder "after podman rm -f"
expect_status "after podman rm -f" '{}'
expect_eq "podman called ADD then DEL for the container" "ADD DEL" \
  "$(jq -r --arg c "$CID" 'select(.containerID == $c) | .command' "$RLOG" | paste -sd' ' -)"
step_done

step "recorder log (what podman passed)"
jq -c '{command, containerID: .containerID[0:12], netns, ifname, args,
        runtimeConfig: .stdin.runtimeConfig, prevResult: (.stdin.prevResult != null)}' "$RLOG" >&2
[ -z "${E2E_OUT_DIR:-}" ] || cp "$RLOG" "$E2E_OUT_DIR/podman-recorder.jsonl"
step_done
