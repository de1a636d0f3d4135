# shellcheck shell=bash
# Common helpers for the e2e recipes. Source it; do not run it.
#
# Every recipe:
#  - re-executes itself in a private PID + mount + IPC namespace
#    (e2e_isolate), so that whatever it starts (daemons, shims, containers,
#    the plugin's background announcers) is killed by the kernel when the
#    recipe ends, even on kill -9, and every mount and System V IPC object it
#    makes vanishes with it;
#  - creates two network namespaces, "host" (the node) and "lan", joined by a
#    veth pair, and runs every runtime inside "host" (e2e_netns_setup);
#  - runs external-ip ($PLUGIN, default bin/external-ip) in the chain of a
#    conflist from conflist-examples/ (e2e_example_conflist);
#  - asserts with check/expect_* helpers: each prints one "PASS name: what" or
#    "FAIL name: what: why" line on stdout (and appends it to $E2E_RESULTS
#    when run-all.sh set it); any FAIL makes the recipe exit 1;
#  - keeps all state under one temp dir ($E2E_TMP) and removes it at exit
#    (E2E_KEEP=1 keeps it for a post-mortem);
#  - bounds every wait (e2e_wait_for, timeout(1)) and itself (E2E_TIMEOUT).

set -eEuo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
E2E_REPO="$(cd "$E2E_DIR/../.." && pwd)"
E2E_BIN="${E2E_BIN:-$E2E_DIR/bin}"            # crictl, cnitool, bridge, host-local, loopback, portmap
E2E_TIMEOUT="${E2E_TIMEOUT:-90}"              # whole-recipe bound, seconds
E2E_EXAMPLES="$E2E_REPO/conflist-examples"
PLUGIN="${PLUGIN:-$E2E_REPO/bin/external-ip}"
E2E_ID="${E2E_ID:-$(printf '%04x%04x' $RANDOM $RANDOM)}"
export E2E_ID PLUGIN
E2E_HOST_NS="e2e-host-$E2E_ID"
E2E_LAN_NS="e2e-lan-$E2E_ID"

# Addresses (documentation ranges only; nothing leaves our namespaces). The
# external IPs the recipes ask for are in the LAN's own subnets (as with
# MetalLB-style L2 addresses): the LAN reaches them by ARP / neighbour
# discovery on lan0, answered by the node. All of them fall in the
# allowedRanges of conflist-examples/ (192.0.2.0/24, 2001:db8::/32).
E2E_HOST_V4=192.0.2.1     E2E_LAN_V4=192.0.2.254    E2E_V4_PREFIX=24
E2E_HOST_V6=2001:db8:1::1 E2E_LAN_V6=2001:db8:1::fe E2E_V6_PREFIX=64
E2E_HOLDER=eip0           # the examples keep the default device
E2E_UPLINK=uplink0

log()  { printf '[%s %s] %s\n' "$(date +%T)" "${E2E_NAME:-e2e}" "$*" >&2; }
step() { E2E_STEP_T0=$(date +%s.%N); log "== $*"; }
step_done() { log "   ok ($(awk -v a="$E2E_STEP_T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}'))"; }

# ---------------------------------------------------------------- results

E2E_PASSES=0 E2E_FAILS=0
_e2e_result() {
  local line
  line="$1 ${E2E_NAME:-e2e}: $(printf '%s' "$2" | tr '\n' ' ' | cut -c1-600)"
  printf '%s\n' "$line"
  [ -z "${E2E_RESULTS:-}" ] || printf '%s\n' "$line" >>"$E2E_RESULTS"
}
pass() { E2E_PASSES=$((E2E_PASSES + 1)); _e2e_result PASS "$*"; }
fail() { E2E_FAILS=$((E2E_FAILS + 1)); _e2e_result FAIL "$*"; }
# die WHY: a FAIL line, then stop the recipe (later steps depend on this one).
die()  { fail "$*"; E2E_DIED=1; exit 1; }

# check DESC CMD...: PASS when CMD exits 0, else FAIL with the tail of its
# output. CMD's output (stdout + stderr) is left in $E2E_OUT. Returns 0
# either way (set -e); $E2E_OK says which.
check() {
  local desc=$1; shift
  local rc=0
  E2E_OUT=$("$@" 2>&1) || rc=$?
  if [ "$rc" = 0 ]; then E2E_OK=1; pass "$desc"
  else E2E_OK=0; fail "$desc: exit $rc: $(tail -c 300 <<<"$E2E_OUT")"; fi
}
# require DESC CMD...: check, and stop the recipe on FAIL.
require() { check "$@"; [ "$E2E_OK" = 1 ] || exit 1; }
# expect_fail DESC REGEX CMD...: PASS when CMD fails and its output matches REGEX.
expect_fail() {
  local desc=$1 re=$2; shift 2
  if E2E_OUT=$("$@" 2>&1); then fail "$desc: succeeded, expected a failure"
  elif grep -Eq -- "$re" <<<"$E2E_OUT"; then pass "$desc"
  else fail "$desc: failed, but the output does not match /$re/: $(tail -c 300 <<<"$E2E_OUT")"; fi
}
# expect_eq DESC WANT GOT
expect_eq() {
  if [ "$2" = "$3" ]; then pass "$1"; else fail "$1: want [$2], got [$3]"; fi
}

# ---------------------------------------------------- isolation, cleanup

# e2e_isolate "$@": call first thing in a recipe. Re-execs the recipe as PID 1
# of a new PID namespace with private mount and IPC namespaces (a pod with
# host IPC shares the recipe's, not the machine's). unshare(1) ignores
# SIGINT/SIGTERM and SIGKILLs the recipe if it dies itself (--kill-child);
# when the recipe (PID 1) exits, the kernel kills every process left in the
# namespace. An outer timeout(1) sends SIGTERM to the process group (the
# recipe's trap then cleans up), and SIGKILL 30s later.
e2e_isolate() {
  if [ "${E2E_ISOLATED:-}" = 1 ]; then return 0; fi
  [ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
  export E2E_ISOLATED=1
  exec timeout -k 30 "$E2E_TIMEOUT" \
    unshare --pid --fork --kill-child --mount --propagation private --mount-proc --ipc \
    bash "$0" "$@"
}

# e2e_init NAME: temp dir, traps, private /var/lib/cni, preconditions.
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
  trap 'E2E_ERR="line $LINENO: $BASH_COMMAND"' ERR
  # In our private mount namespace, give libcni's result cache, host-local's
  # leases (/var/lib/cni/networks, the examples' default) and the
  # containers blob-info cache a private place.
  local d
  for d in /var/lib/cni /var/lib/containers/cache; do
    mkdir -p "$d" "$E2E_TMP/private$d"
    mount --bind "$E2E_TMP/private$d" "$d"
  done
  E2E_CGROUP_PARENT=/eip-e2e-$E2E_ID
  e2e_defer "e2e_rm_cgroups ${E2E_CGROUP_PARENT#/}"
  E2E_EIP_DATA=$E2E_TMP/external-ip
  E2E_EIP_LOG=$E2E_TMP/external-ip.log
  log "run id $E2E_ID, temp dir $E2E_TMP, pid $$, plugin $PLUGIN"
  [ -x "$E2E_BIN/bridge" ] || die "no $E2E_BIN/bridge: run install-deps.sh $E2E_BIN"
  [ -x "$PLUGIN" ] || die "PLUGIN=$PLUGIN is not an executable: run make build"
}

# e2e_rm_cgroups NAME: remove the run's cgroups (/sys/fs/cgroup/*/NAME and
# below). The plugin's socket sink may still be in one: a DEL from podman's
# exit command (`podman container cleanup`, run by conmon) starts it in
# conmon's cgroup, where it waits up to 10 s idle (docs/operating.md). It is
# ours and may be killed at any time (docs/reliability.md), so it is killed
# here; any other process left in them stays, so rmdir fails and run-all.sh
# reports the cgroups left behind.
e2e_rm_cgroups() {
  local d f p i
  for f in $(find /sys/fs/cgroup/*/"$1" -name cgroup.procs 2>/dev/null); do
    for p in $(cat "$f"); do
      ! tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q '^EXTERNAL_IP_SINK=' || kill -KILL "$p" 2>/dev/null || true
    done
  done
  for d in /sys/fs/cgroup/*/"$1"; do
    [ -d "$d" ] || continue
    # A killed process leaves its cgroup once the kernel has reaped it.
    for ((i = 0; i < 50; i++)); do
      find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
      [ -d "$d" ] || break
      sleep 0.1
    done
  done
}

# e2e_defer CMD...: run at exit, last registered first. Errors are ignored.
e2e_defer() { E2E_CLEANUPS+=("$*"); }

e2e_on_exit() {
  local rc=$1 i
  trap - EXIT TERM INT ERR
  set +e
  if [ "$rc" != 0 ] && [ -z "${E2E_DIED:-}" ]; then
    fail "stopped early: exit status $rc${E2E_ERR:+ at $E2E_ERR}"
  fi
  if [ "$E2E_FAILS" != 0 ]; then
    [ "$rc" != 0 ] || rc=1
    log "failed; last lines of the logs under $E2E_TMP:"
    for f in "$E2E_TMP"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  fi
  for ((i=${#E2E_CLEANUPS[@]}-1; i>=0; i--)); do
    timeout -k 5 30 bash -c "${E2E_CLEANUPS[$i]}" >/dev/null 2>&1 || log "cleanup failed: ${E2E_CLEANUPS[$i]}"
  done
  if [ "${E2E_KEEP:-}" = 1 ]; then log "kept $E2E_TMP"; else rm -rf "$E2E_TMP"; fi
  log "$E2E_PASSES passed, $E2E_FAILS failed; total $(awk -v a="$E2E_T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1fs", b-a}'), exit $rc"
  exit "$rc"
}

# e2e_wait_for SECONDS DESCRIPTION CMD...: poll CMD every 0.1s; FAIL and stop
# the recipe if it does not succeed in time.
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

export -f log e2e_kill_pid e2e_rm_cgroups

# ------------------------------------------------------------- namespaces

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
  ip -n "$E2E_HOST_NS" link add "$E2E_UPLINK" type veth peer name lan0 netns "$E2E_LAN_NS"
  for ns in "$E2E_HOST_NS" "$E2E_LAN_NS"; do
    ip -n "$ns" link set lo up
  done
  # What the plugin needs on a node (README, "Reachability requirements"),
  # set only in our netns. A new netns copies the machine's IPv4 `all` and
  # `default` settings (net.core.devconf_inherit_init_net=0), so arp_ignore
  # is set explicitly: a machine with arp_ignore=1 must not fail the suite.
  # IPv6 forwarding: proxy NDP needs it; IPv4 forwarding: proxy ARP needs
  # it (route mode, the default when traffic is steered), as a Kubernetes
  # node has it. The plugin reports both, never sets them.
  local k
  for k in all default "$E2E_UPLINK"; do
    hostns sysctl -qw "net.ipv4.conf.$k.arp_ignore=0"
  done
  hostns sysctl -qw net.ipv4.ip_forward=1
  hostns sysctl -qw net.ipv6.conf.all.forwarding=1
  hostns sysctl -qw "net.ipv6.conf.$E2E_UPLINK.forwarding=1"
  hostns sysctl -qw "net.ipv6.conf.$E2E_UPLINK.accept_dad=0"
  lanns  sysctl -qw net.ipv6.conf.lan0.accept_dad=0
  # The LAN (the node's default router) learns neighbours from unsolicited
  # announcements, so a recipe can see that they arrived: arp_accept for
  # gratuitous ARP; accept_untracked_na for unsolicited NAs, which Linux
  # (RFC 9131) honours only on a router, hence forwarding on lan0.
  lanns  sysctl -qw net.ipv4.conf.lan0.arp_accept=1
  lanns  sysctl -qw net.ipv6.conf.lan0.forwarding=1
  lanns  sysctl -qw net.ipv6.conf.lan0.accept_untracked_na=1
  ip -n "$E2E_HOST_NS" addr add "$E2E_HOST_V4/$E2E_V4_PREFIX" dev "$E2E_UPLINK"
  ip -n "$E2E_HOST_NS" addr add "$E2E_HOST_V6/$E2E_V6_PREFIX" dev "$E2E_UPLINK" nodad
  ip -n "$E2E_LAN_NS"  addr add "$E2E_LAN_V4/$E2E_V4_PREFIX" dev lan0
  ip -n "$E2E_LAN_NS"  addr add "$E2E_LAN_V6/$E2E_V6_PREFIX" dev lan0 nodad
  ip -n "$E2E_HOST_NS" link set "$E2E_UPLINK" up
  ip -n "$E2E_LAN_NS"  link set lan0 up
  ip -n "$E2E_HOST_NS" route add default via "$E2E_LAN_V4"
  ip -n "$E2E_HOST_NS" -6 route add default via "$E2E_LAN_V6"
  e2e_wait_for 10 "lan reachable from host" e2e_ping "$E2E_HOST_NS" "$E2E_LAN_V4"
  log "netns $E2E_HOST_NS ($E2E_UPLINK $E2E_HOST_V4, $E2E_HOST_V6) <-> $E2E_LAN_NS (lan0 $E2E_LAN_V4, $E2E_LAN_V6)"
}

# e2e_ping NETNS IP: one echo from NETNS, 1 s deadline; iputils ping if
# installed, else busybox's (Debian 12 minimal has no ping).
e2e_ping() {
  local p=(busybox ping -c1 -W1)
  if command -v ping >/dev/null && ping -V >/dev/null 2>&1; then p=(ping -n -c1 -W1); fi
  nsenter --net="/run/netns/$1" "${p[@]}" "$2"
}

# ---------------------------------------------------------- CNI plumbing

# e2e_cni_bin DIR: CNI bin dir with the reference plugins, the recorder and
# the plugin under test.
e2e_cni_bin() {
  local d=$1
  mkdir -p "$d"
  for p in bridge host-local loopback portmap; do ln -sf "$E2E_BIN/$p" "$d/$p"; done
  ln -sf "$E2E_DIR/recorder" "$d/recorder"
  ln -sf "$(readlink -f "$PLUGIN")" "$d/external-ip"
}

# e2e_example_conflist FILE RECORDER_LOG [CNIVERSION]: the example
# conflist-examples/FILE as a runtime would get it, changed only so that the
# test can see and clean up everything:
#  - the external-ip entry gets dataDir and logFile under $E2E_TMP (its
#    default dataDir, /run/cni/external-ip, is the machine's) and logLevel
#    debug; its other keys (allowedRanges, capabilities, podAnnotation...)
#    and their defaults (device eip0, announce, conflictProbe) are the
#    example's;
#  - a `recorder` entry goes right before it, with the same capabilities: it
#    logs what the runtime passed and the main plugin's result, which the
#    recipes compare with the final result (prevResult passed unchanged);
#  - CNIVERSION, if given, replaces cniVersion (cnitool's GC and STATUS need
#    1.1.0; the examples are at 1.0.0 for podman 4.3 and containerd 1.6).
e2e_example_conflist() {
  local file=$E2E_EXAMPLES/$1 rlog=$2 ver=${3:-}
  [ -f "$file" ] || die "no example $file"
  jq --arg rlog "$rlog" --arg ver "$ver" --arg dir "$E2E_EIP_DATA" --arg elog "$E2E_EIP_LOG" '
    (if $ver == "" then . else .cniVersion = $ver end)
    | .plugins |= (map(if .type == "external-ip" then
        [{type: "recorder", logFile: $rlog} + (if .capabilities then {capabilities} else {} end),
         . + {dataDir: $dir, logFile: $elog, logLevel: "debug"}]
      else [.] end) | add)' "$file"
}

# ------------------------------------------------- what the node holds

# e2e_holder_addrs: the global addresses on the holder device (hold:
# address), sorted, one line.
e2e_holder_addrs() {
  ip -n "$E2E_HOST_NS" -j addr show dev "$E2E_HOLDER" 2>/dev/null \
    | jq -r '[.[0].addr_info[]? | select(.scope == "global") | .local] | sort | join(" ")'
}
# e2e_holder_routes: the host routes through the holder device with our
# routing protocol (hold: route, routeProtocol 200), sorted, one line.
e2e_holder_routes() {
  { ip -n "$E2E_HOST_NS" -4 -j route show dev "$E2E_HOLDER" proto 200 2>/dev/null
    ip -n "$E2E_HOST_NS" -6 -j route show dev "$E2E_HOLDER" proto 200 2>/dev/null; } \
    | jq -rs '[.[][] | .dst | sub("/(32|128)$"; "")] | sort | join(" ")'
}
# e2e_holder_ips: what the holder device holds either way, sorted, one line.
e2e_holder_ips() { e2e_sorted $(e2e_holder_addrs) $(e2e_holder_routes); }
# e2e_proxy_ips: the proxy neighbour entries on the uplink, both families,
# sorted.
e2e_proxy_ips() {
  { ip -n "$E2E_HOST_NS" -4 -j neigh show proxy dev "$E2E_UPLINK"
    ip -n "$E2E_HOST_NS" -6 -j neigh show proxy dev "$E2E_UPLINK"; } | jq -rs '[.[][].dst] | sort | join(" ")'
}
# e2e_sorted WORD...: the words sorted, on one line (compare with the above).
e2e_sorted() { printf '%s\n' "$@" | sed '/^$/d' | sort | paste -sd' ' -; }

# expect_holder WHEN IP...: the holder holds exactly IP... (as global
# addresses or as routes of ours), and the uplink has a proxy entry for
# exactly those held as routes and the IPv6 ones held as addresses.
expect_holder() {
  local when=$1; shift
  local v6=() ip routes
  routes=" $(e2e_holder_routes) "
  for ip in "$@"; do [[ $ip != *:* && $routes != *" $ip "* ]] || v6+=("$ip"); done
  expect_eq "$when: $E2E_HOLDER holds exactly [$*]" "$(e2e_sorted "$@")" "$(e2e_holder_ips)"
  expect_eq "$when: proxy neighbour entries on $E2E_UPLINK are exactly [${v6[*]}]" \
    "$(e2e_sorted "${v6[@]}")" "$(e2e_proxy_ips)"
}

# e2e_status: `external-ip status --json` for our dataDir, in the host netns.
e2e_status() { hostns "$PLUGIN" status --json --data-dir "$E2E_EIP_DATA"; }

# expect_status WHEN WANT: `external-ip status --json` shows exactly WANT as
# holders of the holder device, a JSON object {"IP": ["network/container/
# ifname", ...]}, with no drift. WANT {} means no IP is held.
expect_status() {
  local when=$1 want=$2 out got
  if ! out=$(e2e_status 2>&1); then
    fail "$when: external-ip status --json failed: $out"; return 0
  fi
  got=$(jq -cS --arg dev "$E2E_HOLDER" '[.[] | select(.device == $dev)] | {
      holders: ([.[].ips[] | {key: .ip, value: ([.holders[] | "\(.network)/\(.containerID)/\(.ifName)"] | sort)}] | from_entries),
      drift: [.[].drift[]]}' <<<"$out") || { fail "$when: status --json is not the expected JSON: $out"; return 0; }
  want=$(jq -cS --argjson h "$want" -n '{holders: ($h | map_values(sort)), drift: []}')
  if [ "$got" = "$want" ]; then
    pass "$when: external-ip status --json shows holders $(jq -c .holders <<<"$want"), no drift"
  else
    fail "$when: external-ip status --json: want $want, got $got"
  fi
}

# e2e_show WHEN: the holder, the proxy entries and `external-ip status` in the log.
e2e_show() {
  log "$1: $E2E_HOLDER [$(e2e_holder_ips)], proxy [$(e2e_proxy_ips)]"
  hostns "$PLUGIN" status --data-dir "$E2E_EIP_DATA" 2>&1 | sed 's/^/    /' >&2 || true
}

# e2e_lan_learned IP: the LAN's neighbour entry for IP has the uplink's MAC
# (it came from an announcement if no traffic to IP has been sent yet).
e2e_lan_learned() {
  local mac
  mac=$(ip -n "$E2E_HOST_NS" -j link show dev "$E2E_UPLINK" | jq -r '.[0].address')
  [ "$(ip -n "$E2E_LAN_NS" -j neigh show "$1" dev lan0 | jq -r '.[0].lladdr // empty')" = "$mac" ]
}

# ---------------------------------------------------------------- images

# e2e_rootfs DIR [BUSYBOX]: a minimal rootfs, BUSYBOX (default
# busybox-static's) and its applets as hard links, as the busybox images
# have them: a path masked in a container (a bind mount over it) is then
# that applet alone, not the binary every applet links to. A dynamic
# BUSYBOX needs e2e_rootfs_libs.
e2e_rootfs() {
  local d=$1 bb=${2:-/bin/busybox}
  mkdir -p "$d/bin" "$d/proc" "$d/sys" "$d/dev" "$d/etc" "$d/tmp" "$d/run"
  cp "$bb" "$d/bin/busybox"
  local a
  for a in $("$d/bin/busybox" --list); do
    [ -e "$d/bin/$a" ] || ln "$d/bin/busybox" "$d/bin/$a"
  done
  echo 'root:x:0:0:root:/:/bin/sh' >"$d/etc/passwd"
  echo 'root:x:0:' >"$d/etc/group"
}

# e2e_rootfs_libs DIR ELF...: copies into the rootfs DIR, at their paths on
# this machine, the shared libraries and the loader that each dynamically
# linked ELF file needs (as ldd resolves them here); fails naming a missing one.
e2e_rootfs_libs() {
  local d=$1 f lib
  shift
  for f in "$@"; do
    ! ldd "$f" 2>&1 | grep 'not found' || { echo "e2e_rootfs_libs: $f needs a library this machine lacks" >&2; return 1; }
    for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*'); do
      [ -e "$d$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$d$lib"
    done
  done
}

# e2e_oci_image ROOTFS REF DEST [CONFIG...]: ROOTFS as an image named REF,
# built with buildah (own storage under $E2E_TMP, vfs driver: no overlay
# mounts needed) and pushed to DEST, a buildah destination (oci:DIR:REF adds
# it to the OCI layout DIR, which may hold others). Its command sleeps
# unless CONFIG (buildah config options, e.g. --cmd '["sh"]' --user 1000)
# says otherwise.
e2e_oci_image() {
  local rootfs=$1 ref=$2 dest=$3
  shift 3
  local b=(buildah --root "$E2E_TMP/buildah/root" --runroot "$E2E_TMP/buildah/run" --storage-driver vfs)
  local c
  c=$("${b[@]}" from --quiet scratch)
  "${b[@]}" copy --quiet "$c" "$rootfs" / >/dev/null
  "${b[@]}" config --entrypoint '[]' --cmd '["/bin/sleep", "2147483647"]' --env PATH=/bin --workingdir / "$@" "$c"
  "${b[@]}" commit --quiet "$c" "$ref" >/dev/null
  "${b[@]}" push --quiet "$ref" "$dest" >/dev/null
  "${b[@]}" rm "$c" >/dev/null
}

# e2e_oci_archive ROOTFS REF OUT [CONFIG...]: e2e_oci_image as an OCI image
# archive OUT holding that image alone.
e2e_oci_archive() { e2e_oci_image "$1" "$2" "oci-archive:$3:$2" "${@:4}"; }

# ------------------------------------------------------------- containerd

# e2e_containerd_start CNI_BIN CNI_CONF SANDBOX_IMAGE [DIR [NETNS]]: containerd
# 1.6 with its CRI plugin in the netns NETNS (default the host netns), state
# under DIR (default $E2E_TMP/containerd; its log DIR.log), reading CNI
# configs from CNI_CONF (it reloads them when they change). Sets SOCK,
# CRICTL and CTR (command arrays) and CTRD_PID; waits for the socket; stops
# it, removing every pod first, at exit.
e2e_containerd_start() {
  local cni_bin=$1 cni_conf=$2 sandbox=$3 dir=${4:-$E2E_TMP/containerd} ns=${5:-$E2E_HOST_NS}
  SOCK=$dir/containerd.sock
  mkdir -p "$dir"
  cat >"$dir/config.toml" <<EOF
version = 2
root = "$dir/root"
state = "$dir/state"
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
  path = "$dir/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$sandbox"
  restrict_oom_score_adj = true
  # pin pod netns under $dir/state, not /var/run/netns, so nothing
  # is left on the machine if the recipe is killed
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$cni_bin"
    conf_dir = "$cni_conf"
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
  nsenter --net="/run/netns/$ns" setsid containerd --config "$dir/config.toml" >"$dir.log" 2>&1 &
  CTRD_PID=$!
  # Graceful stop at exit: remove pods while containerd is still up, then stop
  # it. Anything left is killed by the kernel when our PID namespace goes.
  e2e_defer "e2e_kill_pid $CTRD_PID 10"
  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$SOCK" "$SOCK" >"$dir/crictl.yaml"
  # crictl runs in containerd's netns too: exec/attach/port-forward go through
  # the CRI streaming server, which listens on 127.0.0.1 of that netns.
  CRICTL=(timeout 60 nsenter --net="/run/netns/$ns" "$E2E_BIN/crictl" --config "$dir/crictl.yaml" --runtime-endpoint "unix://$SOCK"
          --image-endpoint "unix://$SOCK" --timeout 30s)
  CTR=(timeout 60 ctr --address "$SOCK" --namespace k8s.io)
  e2e_wait_for 30 "containerd socket" "${CRICTL[@]}" info
  e2e_defer "${CRICTL[*]} rmp --force --all"
}

# ----------------------------------------------------------------- podman

# e2e_podman_setup CNI_BIN CNI_CONF NETWORK: podman 4.3 on its CNI backend,
# all its state under $E2E_TMP/podman (vfs, cgroupfs, file events), NETWORK
# the default. Sets PODMAN (a command array, run in the host netns); removes
# every container at exit.
e2e_podman_setup() {
  local cni_bin=$1 cni_conf=$2 net=$3
  mkdir -p "$E2E_TMP/podman/tmp" "$E2E_TMP/podman/run"
  cat >"$E2E_TMP/containers.conf" <<EOF
[containers]
log_driver = "k8s-file"
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$E2E_TMP/podman/events.log"
tmp_dir = "$E2E_TMP/podman/tmp"
volume_path = "$E2E_TMP/podman/volumes"
[network]
network_backend = "cni"
cni_plugin_dirs = ["$cni_bin"]
network_config_dir = "$cni_conf"
default_network = "$net"
EOF
  cat >"$E2E_TMP/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$E2E_TMP/podman/root"
runroot = "$E2E_TMP/podman/run"
EOF
  # Reported on this machine: podman needs nofile and nproc <= 32768.
  ulimit -n 32768 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  ulimit -u 32768
  export CONTAINERS_CONF="$E2E_TMP/containers.conf" CONTAINERS_STORAGE_CONF="$E2E_TMP/storage.conf"
  export CONTAINERS_REGISTRIES_CONF="$E2E_TMP/registries.conf"; : >"$CONTAINERS_REGISTRIES_CONF"
  unset CNI_ARGS
  PODMAN=(timeout 60 nsenter --net="/run/netns/$E2E_HOST_NS" podman
          --root "$E2E_TMP/podman/root" --runroot "$E2E_TMP/podman/run" --tmpdir "$E2E_TMP/podman/tmp"
          --storage-driver vfs --cgroup-manager cgroupfs --events-backend file
          --network-config-dir "$cni_conf" --runtime /usr/bin/runc)
  # Remove what is left while podman can still tear the network down; then the
  # kernel kills whatever remains in our PID namespace.
  e2e_defer "${PODMAN[*]} rm --force --all --time 0"
}
