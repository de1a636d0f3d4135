#!/usr/bin/env bash
# Recipe b: podman 4.3 with the CNI network backend, inside the "host" netns.
# Runs a busybox rootfs (`podman run --rootfs [OPTS] DIR CMD`: --rootfs is a
# boolean, the first argument is the directory; no image) on a conflist bridge +
# host-local + recorder (cniVersion 1.0.0) and shows from the recorder log
# what podman passes to the chained plugin: CNI_ARGS (from the podman
# process's own CNI_ARGS environment variable), runtimeConfig, and what
# happens to --annotation and --network NAME:opts.
#   usage: podman-cni.sh            (root; run install-deps.sh first)
#   env:   E2E_BIN (default ./bin), E2E_KEEP=1, E2E_TIMEOUT (300)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init podman

T=$E2E_TMP
RLOG=$T/recorder.log
CNI_BIN=$T/cni/bin
CNI_CONF=$T/cni/net.d
NET=e2e-podman
mkdir -p "$CNI_CONF" "$T/podman/tmp" "$T/podman/run"

step "network namespaces"
e2e_netns_setup
step_done

step "CNI bin dir + conflist + containers.conf"
e2e_cni_bin "$CNI_BIN"
e2e_conflist "$NET" 1.0.0 "$RLOG" >"$CNI_CONF/$NET.conflist"
cat >"$T/containers.conf" <<EOF
[containers]
log_driver = "k8s-file"
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$T/podman/events.log"
tmp_dir = "$T/podman/tmp"
volume_path = "$T/podman/volumes"
[network]
network_backend = "cni"
cni_plugin_dirs = ["$CNI_BIN"]
network_config_dir = "$CNI_CONF"
default_network = "$NET"
EOF
cat >"$T/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$T/podman/root"
runroot = "$T/podman/run"
EOF
e2e_rootfs "$T/rootfs"
# podman (runc) refuses RLIMIT_NOFILE/NPROC above what this machine allows
# inside containers: keep both at 32768 or lower.
ulimit -n 32768 2>/dev/null || ulimit -n "$(ulimit -Hn)"
ulimit -u 32768
export CONTAINERS_CONF="$T/containers.conf" CONTAINERS_STORAGE_CONF="$T/storage.conf"
export CONTAINERS_REGISTRIES_CONF="$T/registries.conf"; : >"$CONTAINERS_REGISTRIES_CONF"
PODMAN=(timeout 60 nsenter --net="/run/netns/$E2E_HOST_NS" podman
        --root "$T/podman/root" --runroot "$T/podman/run" --tmpdir "$T/podman/tmp"
        --storage-driver vfs --cgroup-manager cgroupfs --events-backend file
        --network-config-dir "$CNI_CONF" --runtime /usr/bin/runc)
RUN_OPTS=(--cgroup-parent "$E2E_CGROUP_PARENT" --rootfs)
# Remove what is left while podman can still tear the network down; then the
# kernel kills whatever remains in our PID namespace.
e2e_defer "${PODMAN[*]} rm --force --all --time 0"
step_done

step "podman info / network ls"
"${PODMAN[@]}" info --format '{{.Host.NetworkBackend}} {{.Host.OCIRuntime.Name}} {{.Host.CgroupManager}} {{.Host.CgroupsVersion}} {{.Store.GraphDriverName}}' >&2
"${PODMAN[@]}" network ls >&2
"${PODMAN[@]}" network inspect "$NET" | jq -c '.[0] | {name, driver, subnets, network_interface}' >&2
step_done

step "podman run --rm (CNI_ARGS env, --annotation, one-shot)"
CNI_ARGS="EXTERNAL_IPS=198.51.100.11,2001:db8:ff::11;FOO=bar" \
  "${PODMAN[@]}" run --rm "${RUN_OPTS[@]}" --network "$NET" --name e2e-oneshot \
    --annotation external-ip/addresses=198.51.100.12 \
    "$T/rootfs" /bin/sh -c 'ip -4 addr show eth0 | grep inet' >&2
step_done

step "podman run -d, then stop + rm (DEL path; --network NAME:ip=...)"
CID=$(CNI_ARGS="EXTERNAL_IPS=198.51.100.13" \
  "${PODMAN[@]}" run -d "${RUN_OPTS[@]}" --network "$NET:ip=198.18.0.50" --name e2e-detached \
    "$T/rootfs" /bin/sleep 3600)
log "container $CID"
"${PODMAN[@]}" inspect e2e-detached | jq -c '.[0].NetworkSettings.Networks' >&2
"${PODMAN[@]}" stop --time 1 e2e-detached >/dev/null
"${PODMAN[@]}" rm e2e-detached >/dev/null
step_done

step "recorder log: what podman passed to the chained plugin"
jq -c '{command, containerID: .containerID[0:12], netns, ifname, args,
        runtimeConfig: .stdin.runtimeConfig, prevResult: (.stdin.prevResult != null)}' "$RLOG" >&2
cmds=$(jq -r .command "$RLOG" | paste -sd, -)
log "commands: $cmds"
jq -se 'map(select(.command=="ADD"))[0].args | test("EXTERNAL_IPS=198.51.100.11,2001:db8:ff::11")' "$RLOG" >/dev/null \
  || die "CNI_ARGS from the environment did not reach the plugin"
if jq -se 'map(.stdin | tostring | test("198.51.100.12")) | any' "$RLOG" >/dev/null; then
  log "NOTE: --annotation reached the plugin"
else
  log "as expected: --annotation does not reach CNI plugins with podman"
fi
log "PASS: podman passes its own CNI_ARGS environment variable to every plugin of the chain"
[ -z "${E2E_OUT:-}" ] || cp "$RLOG" "$E2E_OUT/podman-recorder.jsonl"
step_done
