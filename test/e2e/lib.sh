# shellcheck shell=bash
# Common helpers for the e2e recipes. Source it; do not run it.
#
# Every recipe:
#  - re-executes itself in a private PID + mount namespace (e2e_isolate), so
#    that whatever it starts (daemons, shims, containers) is killed by the
#    kernel when the recipe ends, even on kill -9, and every mount it makes
#    (netns pins, overlays) vanishes with it;
#  - creates two network namespaces, "host" and "lan", joined by a veth pair,
#    and runs every runtime inside "host" (e2e_netns_setup);
#  - keeps all state under one temp dir ($E2E_TMP) and removes it at exit
#    (set E2E_KEEP=1 to keep it for a post-mortem);
#  - bounds every wait (e2e_wait_for, timeout(1)).

set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
E2E_BIN="${E2E_BIN:-$E2E_DIR/bin}"            # crictl, cnitool, bridge, host-local, loopback
E2E_TIMEOUT="${E2E_TIMEOUT:-300}"             # whole-recipe bound, seconds
E2E_ID="${E2E_ID:-$(printf '%04x%04x' $RANDOM $RANDOM)}"
export E2E_ID
E2E_HOST_NS="e2e-host-$E2E_ID"
E2E_LAN_NS="e2e-lan-$E2E_ID"

# Addresses (documentation ranges only; nothing leaves our namespaces).
E2E_HOST_V4=192.0.2.1   E2E_LAN_V4=192.0.2.254   E2E_V4_PREFIX=24
E2E_HOST_V6=2001:db8:1::1 E2E_LAN_V6=2001:db8:1::fe E2E_V6_PREFIX=64
E2E_POD_SUBNET=198.18.0.0/24                  # bridge + host-local pod range
E2E_EXTERNAL_IP=198.51.100.10                 # what the pods ask for

log()  { printf '[%s %s] %s\n' "$(date +%T)" "${E2E_NAME:-e2e}" "$*" >&2; }
die()  { log "FAIL: $*"; exit 1; }
step() { E2E_STEP_T0=$(date +%s.%N); log "== $*"; }
step_done() { log "   ok ($(awk -v a="$E2E_STEP_T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}'))"; }

# e2e_isolate "$@": call first thing in a recipe. Re-execs the recipe as PID 1
# of a new PID namespace with a private mount namespace. unshare(1) ignores
# SIGINT/SIGTERM and SIGKILLs the recipe if it dies itself (--kill-child);
# when the recipe (PID 1) exits, the kernel kills every process left in the
# namespace. An outer timeout(1) sends SIGTERM to the process group (the
# recipe's trap then cleans up), and SIGKILL 30s later.
e2e_isolate() {
  if [ "${E2E_ISOLATED:-}" = 1 ] || [ "${E2E_NO_ISOLATE:-}" = 1 ]; then return 0; fi
  [ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
  export E2E_ISOLATED=1
  exec timeout -k 30 "$E2E_TIMEOUT" \
    unshare --pid --fork --kill-child --mount --propagation private --mount-proc \
    bash "$0" "$@"
}

# e2e_init NAME: temp dir, traps, log.
e2e_init() {
  E2E_NAME="$1"
  E2E_TMP="$(mktemp -d "/tmp/eip-e2e-$1-$E2E_ID.XXXX")"
  chmod 0755 "$E2E_TMP"
  export E2E_TMP E2E_NAME
  E2E_CLEANUPS=()
  E2E_T0=$(date +%s.%N)
  trap 'e2e_on_exit $?' EXIT
  trap 'log "signal: TERM"; exit 143' TERM
  trap 'log "signal: INT"; exit 130' INT
  if [ "${E2E_ISOLATED:-}" = 1 ]; then
    # In our private mount namespace, give libcni's result cache and the
    # containers blob-info cache a private place (they default to the
    # machine's /var/lib/cni and /var/lib/containers/cache).
    local d
    for d in /var/lib/cni /var/lib/containers/cache; do
      mkdir -p "$d" "$E2E_TMP/private$d"
      mount --bind "$E2E_TMP/private$d" "$d"
    done
  fi
  E2E_CGROUP_PARENT=/eip-e2e-$E2E_ID
  e2e_defer "for d in /sys/fs/cgroup/*/${E2E_CGROUP_PARENT#/}; do [ ! -d \$d ] || rmdir \$d/conmon \$d 2>/dev/null; done; true"
  [ -x "$E2E_BIN/bridge" ] || die "no $E2E_BIN/bridge: run install-deps.sh $E2E_BIN"
  log "run id $E2E_ID, temp dir $E2E_TMP, pid $$"
}

# e2e_defer CMD...: run at exit, last registered first. Errors are ignored.
e2e_defer() { E2E_CLEANUPS+=("$*"); }

e2e_on_exit() {
  local rc=$1 i
  trap - EXIT TERM INT
  set +e
  if [ "$rc" != 0 ]; then
    log "exit status $rc; last lines of logs under $E2E_TMP:"
    for f in "$E2E_TMP"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  fi
  for ((i=${#E2E_CLEANUPS[@]}-1; i>=0; i--)); do
    timeout -k 5 30 bash -c "${E2E_CLEANUPS[$i]}" >/dev/null 2>&1 || log "cleanup failed: ${E2E_CLEANUPS[$i]}"
  done
  if [ "${E2E_KEEP:-}" = 1 ]; then log "kept $E2E_TMP"; else rm -rf "$E2E_TMP"; fi
  log "total $(awk -v a="$E2E_T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1fs", b-a}'), exit $rc"
  exit "$rc"
}

# e2e_wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.1s.
e2e_wait_for() {
  local t=$1 what=$2; shift 2
  local end=$(( $(date +%s) + t ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || die "timed out after ${t}s waiting for $what"
    sleep 0.1
  done
}

# e2e_kill_pid PID [GRACE]: TERM, wait up to GRACE seconds, then KILL.
e2e_kill_pid() {
  local pid=$1 grace=${2:-10} i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i=0; i<grace*10; i++)); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

export -f log e2e_kill_pid

# Enter only the network namespace. Not `ip netns exec`: that also remounts
# /sys, which drops the cgroup v1 mounts under /sys/fs/cgroup, and runc then
# fails with "no cgroup mount found in mountinfo". Side effect of nsenter:
# /sys/class/net still shows the machine's interfaces; use netlink (ip) and
# /proc/sys/net (per netns) instead.
hostns() { nsenter --net="/run/netns/$E2E_HOST_NS" "$@"; }
lanns()  { nsenter --net="/run/netns/$E2E_LAN_NS" "$@"; }

# e2e_netns_setup: "host" and "lan" namespaces, veth uplink0 (host) <-> lan0
# (lan), IPv4 + IPv6 on both, default routes in host via lan. No interface of
# the machine is touched: both veth ends are created inside the namespaces.
e2e_netns_setup() {
  ip netns add "$E2E_HOST_NS"
  e2e_defer "ip netns del $E2E_HOST_NS"
  ip netns add "$E2E_LAN_NS"
  e2e_defer "ip netns del $E2E_LAN_NS"
  ip -n "$E2E_HOST_NS" link add uplink0 type veth peer name lan0 netns "$E2E_LAN_NS"
  for ns in "$E2E_HOST_NS" "$E2E_LAN_NS"; do
    ip -n "$ns" link set lo up
  done
  hostns sysctl -qw net.ipv6.conf.uplink0.accept_dad=0
  lanns  sysctl -qw net.ipv6.conf.lan0.accept_dad=0
  ip -n "$E2E_HOST_NS" addr add "$E2E_HOST_V4/$E2E_V4_PREFIX" dev uplink0
  ip -n "$E2E_HOST_NS" addr add "$E2E_HOST_V6/$E2E_V6_PREFIX" dev uplink0 nodad
  ip -n "$E2E_LAN_NS"  addr add "$E2E_LAN_V4/$E2E_V4_PREFIX" dev lan0
  ip -n "$E2E_LAN_NS"  addr add "$E2E_LAN_V6/$E2E_V6_PREFIX" dev lan0 nodad
  ip -n "$E2E_HOST_NS" link set uplink0 up
  ip -n "$E2E_LAN_NS"  link set lan0 up
  ip -n "$E2E_HOST_NS" route add default via "$E2E_LAN_V4"
  ip -n "$E2E_HOST_NS" -6 route add default via "$E2E_LAN_V6"
  e2e_wait_for 10 "lan reachable from host" hostns busybox ping -c1 -W1 "$E2E_LAN_V4"
  log "netns $E2E_HOST_NS (uplink0 $E2E_HOST_V4, $E2E_HOST_V6) <-> $E2E_LAN_NS (lan0 $E2E_LAN_V4, $E2E_LAN_V6)"
}

# e2e_cni_bin DIR: CNI bin dir with the reference plugins and the recorder.
e2e_cni_bin() {
  local d=$1
  mkdir -p "$d"
  for p in bridge host-local loopback; do ln -sf "$E2E_BIN/$p" "$d/$p"; done
  ln -sf "$E2E_DIR/recorder" "$d/recorder"
}

# e2e_conflist NAME VERSION RECORDER_LOG [BRIDGE] [SUBNET]: bridge +
# host-local + recorder (with the pod-annotations and externalIPs
# capabilities), host-local state under $E2E_TMP.
e2e_conflist() {
  local name=$1 ver=$2 rlog=$3 br=${4:-eipbr0} subnet=${5:-$E2E_POD_SUBNET}
  jq -n --arg name "$name" --arg ver "$ver" --arg rlog "$rlog" --arg br "$br" \
        --arg subnet "$subnet" --arg ipamdir "$E2E_TMP/ipam" '{
    cniVersion: $ver, name: $name,
    plugins: [
      {type: "bridge", bridge: $br, isGateway: true, ipMasq: false,
       ipam: {type: "host-local", dataDir: $ipamdir,
              ranges: [[{subnet: $subnet}]], routes: [{dst: "0.0.0.0/0"}]}},
      {type: "recorder", logFile: $rlog,
       capabilities: {"io.kubernetes.cri.pod-annotations": true, externalIPs: true}}
    ]}'
}

# e2e_rootfs DIR: a minimal rootfs, busybox-static and its applet links.
e2e_rootfs() {
  local d=$1
  mkdir -p "$d/bin" "$d/proc" "$d/sys" "$d/dev" "$d/etc" "$d/tmp" "$d/run"
  cp /bin/busybox "$d/bin/busybox"
  local a
  for a in $("$d/bin/busybox" --list); do
    [ -e "$d/bin/$a" ] || ln -s busybox "$d/bin/$a"
  done
  echo 'root:x:0:0:root:/:/bin/sh' >"$d/etc/passwd"
  echo 'root:x:0:' >"$d/etc/group"
}

# e2e_oci_archive ROOTFS REF OUT: an OCI image archive of ROOTFS named REF,
# built with buildah (own storage under $E2E_TMP, vfs driver: no overlay
# mounts needed).
e2e_oci_archive() {
  local rootfs=$1 ref=$2 out=$3
  local b=(buildah --root "$E2E_TMP/buildah/root" --runroot "$E2E_TMP/buildah/run" --storage-driver vfs)
  local c
  c=$("${b[@]}" from --quiet scratch)
  "${b[@]}" copy --quiet "$c" "$rootfs" / >/dev/null
  "${b[@]}" config --entrypoint '[]' --cmd '["/bin/sleep", "2147483647"]' --env PATH=/bin --workingdir / "$c"
  "${b[@]}" commit --quiet "$c" "$ref" >/dev/null
  "${b[@]}" push --quiet "$ref" "oci-archive:$out:$ref" >/dev/null
  "${b[@]}" rm "$c" >/dev/null
}
