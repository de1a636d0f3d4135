#!/usr/bin/env bash
# Recipe a: containerd (CRI plugin) + crictl, inside the "host" netns.
# Runs a pod sandbox with the annotation external-ip/addresses=198.51.100.10
# on a conflist bridge + host-local + recorder (cniVersion 1.0.0), runs a
# busybox container in it, then stops and removes everything, and checks
# from the recorder log what containerd passed to the chained plugin.
#   usage: containerd-cri.sh            (root; run install-deps.sh first)
#   env:   E2E_BIN (default ./bin), E2E_KEEP=1, E2E_TIMEOUT (300)
#          PLUGIN=/path/to/external-ip  add our plugin after the recorder
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_isolate "$@"
e2e_init containerd

T=$E2E_TMP
SOCK=$T/containerd/containerd.sock
RLOG=$T/recorder.log
CNI_BIN=$T/cni/bin
CNI_CONF=$T/cni/net.d
mkdir -p "$T/containerd" "$CNI_CONF" "$T/pods"

step "network namespaces"
e2e_netns_setup
step_done

step "CNI bin dir + conflist"
e2e_cni_bin "$CNI_BIN"
[ -z "${PLUGIN:-}" ] || ln -sf "$PLUGIN" "$CNI_BIN/external-ip"
e2e_conflist e2e-cri 1.0.0 "$RLOG" >"$CNI_CONF/10-e2e.conflist"
cat "$CNI_CONF/10-e2e.conflist" >&2
step_done

step "image: busybox rootfs -> OCI archive (buildah)"
e2e_rootfs "$T/rootfs"
e2e_oci_archive "$T/rootfs" localhost/e2e/busybox:latest "$T/busybox.oci.tar"
step_done

step "containerd config + start"
cat >"$T/containerd/config.toml" <<EOF
version = 2
root = "$T/containerd/root"
state = "$T/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$T/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/e2e/busybox:latest"
  restrict_oom_score_adj = true
  # pin pod netns under $T/containerd/state, not /var/run/netns, so nothing
  # is left on the machine if the recipe is killed
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$CNI_CONF"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "/usr/bin/runc"
        SystemdCgroup = false
EOF
# setsid: a timeout(1) SIGTERM to our process group must not stop containerd
# before the exit trap has removed the pods through it.
hostns setsid containerd --config "$T/containerd/config.toml" >"$T/containerd.log" 2>&1 &
CTRD_PID=$!
# Graceful stop at exit: remove pods while containerd is still up, then stop
# it. Anything left is killed by the kernel when our PID namespace goes.
e2e_defer "e2e_kill_pid $CTRD_PID 10"
printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$SOCK" "$SOCK" >"$T/crictl.yaml"
# crictl runs in the host netns too: exec/attach/port-forward go through the
# CRI streaming server, which listens on 127.0.0.1 of the host netns.
CRICTL=(timeout 60 nsenter --net="/run/netns/$E2E_HOST_NS" "$E2E_BIN/crictl" --config "$T/crictl.yaml" --runtime-endpoint "unix://$SOCK"
        --image-endpoint "unix://$SOCK" --timeout 30s)
CTR=(timeout 60 ctr --address "$SOCK" --namespace k8s.io)
e2e_wait_for 30 "containerd socket" "${CRICTL[@]}" info
e2e_defer "${CRICTL[*]} rmp --force --all"
step_done

step "import image"
"${CTR[@]}" images import --no-unpack=false "$T/busybox.oci.tar" >&2
"${CRICTL[@]}" images >&2
step_done

step "crictl info: CNI config loaded"
"${CRICTL[@]}" info | jq -c '.status.conditions, .config.cni' >&2
step_done

step "runp (pod sandbox with the annotation)"
cat >"$T/pod.json" <<EOF
{
  "metadata": {"name": "e2e-pod", "namespace": "default", "uid": "e2e-uid-$E2E_ID", "attempt": 0},
  "hostname": "e2e-pod",
  "log_directory": "$T/pods",
  "annotations": {"external-ip/addresses": "$E2E_EXTERNAL_IP", "other/annotation": "x"},
  "labels": {"app": "e2e"},
  "linux": {"cgroup_parent": "$E2E_CGROUP_PARENT"}
}
EOF
POD=$("${CRICTL[@]}" runp "$T/pod.json")
log "pod $POD"
"${CRICTL[@]}" inspectp "$POD" | jq -c '.status.network, .info.runtimeSpec.linux.namespaces' >&2
step_done

step "container in the pod (busybox)"
cat >"$T/ctr.json" <<EOF
{
  "metadata": {"name": "sleeper"},
  "image": {"image": "localhost/e2e/busybox:latest"},
  "command": ["/bin/sh", "-c", "ip -4 addr show eth0; exec sleep 3600"],
  "log_path": "sleeper.log",
  "linux": {}
}
EOF
CID=$("${CRICTL[@]}" create "$POD" "$T/ctr.json" "$T/pod.json")
"${CRICTL[@]}" start "$CID" >/dev/null
e2e_wait_for 20 "container running" bash -c "${CRICTL[*]} inspect $CID | jq -e '.status.state == \"CONTAINER_RUNNING\"'"
e2e_wait_for 10 "container log" grep -q inet "$T/pods/sleeper.log"
log "container $CID, its eth0:"; sed 's/^/    /' "$T/pods/sleeper.log" >&2
"${CRICTL[@]}" exec "$CID" ip -4 route >&2
step_done

[ -z "${E2E_HOLD:-}" ] || { log "holding ${E2E_HOLD}s (E2E_HOLD)"; sleep "$E2E_HOLD" & wait $!; }
step "stop + remove"
"${CRICTL[@]}" stop --timeout 2 "$CID" >/dev/null
"${CRICTL[@]}" rm "$CID" >/dev/null
"${CRICTL[@]}" stopp "$POD" >/dev/null
"${CRICTL[@]}" rmp "$POD" >/dev/null
step_done

step "recorder log: what containerd passed to the chained plugin"
jq -c '{command, containerID: .containerID[0:12], netns, ifname, args,
        annotations: .stdin.runtimeConfig["io.kubernetes.cri.pod-annotations"],
        runtimeConfig: (.stdin.runtimeConfig | keys?), prevResult: (.stdin.prevResult != null)}' "$RLOG" >&2
cmds=$(jq -r .command "$RLOG" | paste -sd, -)
[ "$cmds" = "ADD,DEL,DEL" ] || die "expected ADD,DEL,DEL, got $cmds"
[ "$(jq -r 'select(.command=="ADD") | .stdin.runtimeConfig["io.kubernetes.cri.pod-annotations"]["external-ip/addresses"]' "$RLOG")" = "$E2E_EXTERNAL_IP" ] \
  || die "ADD did not carry the pod annotation"
jq -se 'map(select(.command=="ADD"))[0].stdin.prevResult.ips[0].address' "$RLOG" >/dev/null || die "ADD had no prevResult"
log "PASS: ADD carried runtimeConfig[io.kubernetes.cri.pod-annotations][external-ip/addresses]=$E2E_EXTERNAL_IP; DEL called $(grep -c '"command":"DEL"' "$RLOG") times"
[ -z "${E2E_OUT:-}" ] || cp "$RLOG" "$E2E_OUT/containerd-recorder.jsonl"
step_done
