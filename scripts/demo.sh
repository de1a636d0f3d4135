#!/usr/bin/env bash
# demo.sh: external-ip end to end, in network namespaces only.
#
# A node namespace with an uplink (veth) to a LAN namespace, and two
# container namespaces. Containers A and B both ask, through cnitool's
# CAP_ARGS (runtimeConfig.externalIPs), for the external IPs 192.0.2.100
# and 2001:db8::100 on a bridge + host-local + external-ip network, on a
# node with IPVS strictARP's sysctls (arp_ignore 1, arp_announce 2). The
# demo shows, and checks, each step: the IPs held as routes through the
# holder device eip0 (route mode, the default when traffic is steered)
# with proxy ARP and NDP entries on the uplink, and their two holders;
# CHECK; the gratuitous ARP and unsolicited NA the LAN sees; the LAN
# reaching both IPs (the proxy entry answers whatever arp_ignore says); a
# LAN client's connections to the IP reaching the containers (spread over
# A and B) with its own address; A's outbound connection arriving from the
# IP; DEL A (the IPs stay), DEL B (they go); and the same IP held as an
# address (`"hold": "address"`) refused on this node. It exits non-zero as
# soon as a step does not show what it should, and removes everything it
# made.
#
# Needs root, iproute2, iputils-ping, jq, netcat-openbsd and nft (tcpdump
# optional): `make demo`
# installs them first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN_DIR:-$ROOT/bin}

EIP=192.0.2.100
EIP6=2001:db8::100
NET=eip-demo
NODE=eipdemo-node
LAN=eipdemo-lan
CTRA=eipdemo-ctra
CTRB=eipdemo-ctrb
NODE_IP=192.0.2.1
LAN_IP=192.0.2.2
# What cnitool passes as runtimeConfig: both IPs, one of each family.
CAPS="{\"externalIPs\":[\"$EIP\",\"$EIP6\"]}"
NODE_IP6=2001:db8::1
LAN_IP6=2001:db8::2

if [[ -t 1 ]]; then B=$'\e[1m' G=$'\e[32m' R=$'\e[31m' N=$'\e[0m'; else B='' G='' R='' N=''; fi
heading() { printf '\n%s== %s%s\n' "$B" "$*" "$N"; }
say() { printf '   %s\n' "$*"; }
ok() { printf '   %sok%s  %s\n' "$G" "$N" "$*"; }
cmd() { printf '   $ %s\n' "$*"; }
indent() { sed 's/^/     /'; }
fail() {
  printf '\n%sdemo FAILED:%s %s\n' "$R" "$N" "$*" >&2
  if [[ -s ${WORK:-/nonexistent}/external-ip.log ]]; then
    printf 'last lines of the plugin log:\n' >&2
    tail -n 5 "$WORK/external-ip.log" | indent >&2
  fi
  exit 1
}
trap 'fail "command failed (line $LINENO): $BASH_COMMAND"' ERR

[[ $EUID -eq 0 ]] || { echo "demo: needs root for network namespaces; run: sudo make demo" >&2; exit 1; }
for tool in ip jq ping go nc nft; do
  command -v "$tool" >/dev/null || { echo "demo: $tool is missing; run: make deps" >&2; exit 1; }
done

# ---------------------------------------------------------------------------
heading "1. Build cnitool, the reference plugins and external-ip into $BIN"
bash "$ROOT/scripts/tools.sh" "$BIN" | indent
ok "cnitool, bridge, host-local, loopback, external-ip are in $BIN"

WORK=$(mktemp -d /tmp/external-ip-demo.XXXXXX)
DATA=$WORK/state
export CNI_PATH=$BIN NETCONFPATH=$WORK/net.d
added=()
capture_pid=

cleanup() {
  local rc=$?
  trap - ERR
  set +e
  [[ -n $capture_pid ]] && kill -INT "$capture_pid" 2>/dev/null && wait "$capture_pid" 2>/dev/null
  for ctr in "${added[@]}"; do
    [[ -n $ctr ]] && ip netns exec "$NODE" "$BIN/cnitool" del "$NET" "/var/run/netns/$ctr" >/dev/null 2>&1
  done
  for ns in "$CTRA" "$CTRB" "$LAN" "$NODE"; do
    ip netns del "$ns" 2>/dev/null
  done
  # cnitool caches results under /var/lib/cni; DEL removes them, this is for
  # a demo cut short.
  rm -f /var/lib/cni/results/"$NET"-cnitool-* 2>/dev/null
  [[ -n ${KEEP_WORK:-} ]] || rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT

# A demo cut short by SIGKILL leaves its namespaces: remove ours only.
for ns in "$CTRA" "$CTRB" "$LAN" "$NODE"; do
  ip netns del "$ns" 2>/dev/null || true
done

# ---------------------------------------------------------------------------
heading "2. Namespaces: node ($NODE) with uplink0 to a LAN ($LAN), containers A and B"
for ns in "$NODE" "$LAN" "$CTRA" "$CTRB"; do
  ip netns add "$ns"
  ip -n "$ns" link set lo up
done
ip -n "$NODE" link add uplink0 type veth peer name lan0 netns "$LAN"
ip -n "$NODE" addr add "$NODE_IP/24" dev uplink0
ip -n "$LAN" addr add "$LAN_IP/24" dev lan0
ip -n "$NODE" addr add "$NODE_IP6/64" dev uplink0 nodad
ip -n "$LAN" addr add "$LAN_IP6/64" dev lan0 nodad
ip -n "$NODE" link set uplink0 up
ip -n "$LAN" link set lan0 up
NODE_MAC=$(ip -n "$NODE" -j link show uplink0 | jq -r '.[0].address')
# What kube-proxy in IPVS mode with strictARP sets: the node answers ARP
# only for addresses of the receiving interface, and announces only them.
ip netns exec "$NODE" sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2
# Proxy NDP answers only on a router: a node that routes to its pods has
# IPv6 forwarding on (the plugin reports it off, never turns it on).
ip netns exec "$NODE" sysctl -qw net.ipv6.conf.all.forwarding=1
say "node   $NODE: uplink0 $NODE_IP/24 and $NODE_IP6/64 (MAC $NODE_MAC), arp_ignore 1 and arp_announce 2 (IPVS strictARP)"
say "LAN    $LAN: lan0 $LAN_IP/24 and $LAN_IP6/64, plays the other hosts on the segment"
say "containers: $CTRA (A), $CTRB (B)"

# ---------------------------------------------------------------------------
heading "3. The network: bridge + host-local + external-ip ($NETCONFPATH/$NET.conflist)"
mkdir -p "$NETCONFPATH"
jq -n --arg net "$NET" --arg ipam "$WORK/ipam" --arg data "$DATA" --arg log "$WORK/external-ip.log" '{
  cniVersion: "1.0.0", name: $net,
  plugins: [
    {type: "bridge", bridge: "cni-demo", isGateway: true, ipMasq: true, hairpinMode: true,
     ipam: {type: "host-local", dataDir: $ipam,
            ranges: [[{subnet: "10.88.0.0/24"}], [{subnet: "fd00:88::/64"}]],
            routes: [{dst: "0.0.0.0/0"}, {dst: "::/0"}]}},
    {type: "external-ip",
     allowedRanges: ["192.0.2.0/24", "2001:db8::/64"],
     announce: {count: 3, interval: "1.1s"},
     dataDir: $data, logFile: $log,
     capabilities: {externalIPs: true}}
  ]}' >"$NETCONFPATH/$NET.conflist"
indent <"$NETCONFPATH/$NET.conflist"
say "hold is auto (the default): traffic both steers ingress, so the IP is held as a route"
say "CNI_PATH=$CNI_PATH"
say "NETCONFPATH=$NETCONFPATH"

# holders IP: how many attachments hold IP, from `external-ip status --json`
# when this build has it, else from the state files.
holders() {
  local out
  if out=$(ip netns exec "$NODE" "$BIN/external-ip" status --json --data-dir "$DATA" 2>/dev/null) &&
    jq -e . >/dev/null 2>&1 <<<"$out"; then
    jq --arg ip "$1" '[.[]?.ips[]? | select(.ip == $ip) | .holders | length] | add // 0' <<<"$out"
  elif [[ -f $DATA/eip0/ip/$1.json ]]; then
    jq '.holders | length' "$DATA/eip0/ip/$1.json"
  else
    echo 0
  fi
}

# on_eip0 IP: IP is held as a route through eip0 (protocol 200, the default
# routeProtocol) with its proxy ARP entry on uplink0, and is no address.
on_eip0() {
  local f=-4
  [[ $1 == *:* ]] && f=-6
  ip "$f" -n "$NODE" route show table main dev eip0 proto 200 2>/dev/null | grep -q "^$1 " &&
    ip "$f" -n "$NODE" neigh show proxy dev uplink0 | grep -q "^$1 " &&
    ! ip -n "$NODE" -o addr show 2>/dev/null | grep -q " $1/"
}
# gone IP: neither the route nor the proxy entry is there.
gone() {
  local f=-4
  [[ $1 == *:* ]] && f=-6
  ! ip "$f" -n "$NODE" route show table main dev eip0 2>/dev/null | grep -q "^$1 " &&
    ! ip "$f" -n "$NODE" neigh show proxy dev uplink0 | grep -q "^$1 "
}
show_route() {
  cmd "ip -n $NODE route show dev eip0; ip -n $NODE -6 route show dev eip0; ip -n $NODE neigh show proxy"
  { ip -n "$NODE" route show dev eip0; ip -n "$NODE" -6 route show dev eip0; ip -n "$NODE" neigh show proxy; } | indent
}

show_holders() {
  cmd "ip netns exec $NODE external-ip status --data-dir $DATA"
  if ip netns exec "$NODE" "$BIN/external-ip" status --data-dir "$DATA" >"$WORK/status" 2>&1; then
    indent <"$WORK/status"
    return
  fi
  say "(this build has no 'external-ip status' yet: the state files under dataDir instead)"
  cmd "jq -c . $DATA/eip0/ip/$EIP.json"
  jq -c . "$DATA/eip0/ip/$EIP.json" | indent
  cmd "jq -c '{network, containerID, ifName, ips}' $DATA/eip0/att/*.json"
  jq -c '{network, containerID, ifName, ips}' "$DATA"/eip0/att/*.json | indent
}

# add NAME NETNS: cnitool add, as a runtime on the node would run it.
add() {
  local name=$1 ctr=$2 out
  cmd "CAP_ARGS='$CAPS' ip netns exec $NODE cnitool add $NET /var/run/netns/$ctr"
  out=$(CAP_ARGS="$CAPS" ip netns exec "$NODE" "$BIN/cnitool" add "$NET" "/var/run/netns/$ctr" 2>&1) ||
    fail "cnitool add for container $name: $out"
  added+=("$ctr")
  local addr
  addr=$(jq -r '.ips[0].address // empty' <<<"$out" 2>/dev/null || true)
  [[ -n $addr ]] || fail "cnitool add for container $name printed no IP: the chain lost the bridge's result: $out"
  ok "container $name has $addr on eth0 (bridge + host-local); external-ip passed that result through"
}

# del NAME NETNS
del() {
  local name=$1 ctr=$2 out
  cmd "ip netns exec $NODE cnitool del $NET /var/run/netns/$ctr"
  out=$(ip netns exec "$NODE" "$BIN/cnitool" del "$NET" "/var/run/netns/$ctr" 2>&1) ||
    fail "cnitool del for container $name: $out"
  added=("${added[@]/$ctr/}")
  ok "container $name detached"
}

# ---------------------------------------------------------------------------
# count_garp: gratuitous ARP for EIP from the node seen so far on the LAN:
# broadcast requests with sender IP = target IP, and their twin replies.
count_garp() {
  tcpdump -r "$WORK/lan.pcap" -n -e -ttttt 2>/dev/null >"$WORK/lan.txt" || true
  requests=$(grep -c "$NODE_MAC > ff:ff:ff:ff:ff:ff.*Request who-has $EIP tell $EIP," "$WORK/lan.txt" || true)
  replies=$(grep -c "$NODE_MAC > ff:ff:ff:ff:ff:ff.*Reply $EIP is-at $NODE_MAC" "$WORK/lan.txt" || true)
  nas=$(grep -c "$NODE_MAC > 33:33:00:00:00:01.* > ff02::1: ICMP6, neighbor advertisement, tgt is $EIP6," "$WORK/lan.txt" || true)
}

capture=0
if command -v tcpdump >/dev/null; then
  ip netns exec "$LAN" tcpdump -i lan0 -n -U --immediate-mode -w "$WORK/lan.pcap" 'arp or icmp6' >/dev/null 2>"$WORK/tcpdump.err" &
  capture_pid=$!
  for _ in $(seq 50); do
    grep -q 'listening on' "$WORK/tcpdump.err" 2>/dev/null && break
    sleep 0.1
  done
  grep -q 'listening on' "$WORK/tcpdump.err" || fail "tcpdump did not start on lan0: $(cat "$WORK/tcpdump.err")"
  capture=1
fi

heading "4. ADD container A, asking for $EIP and $EIP6"
add A "$CTRA"
for ip in "$EIP" "$EIP6"; do
  on_eip0 "$ip" || fail "$ip is not routed to eip0 with a proxy entry on uplink0 after ADD A"
done
n=$(holders "$EIP")
[[ $n -eq 1 ]] || fail "$EIP has $n holders after ADD A, want 1"
ok "$EIP and $EIP6 are routed to eip0 (proto 200) and proxied on uplink0 (ARP, NDP), held by 1 attachment"

heading "5. ADD container B, asking for the same $EIP and $EIP6"
add B "$CTRB"
added_b=$(date +%s.%N)
on_eip0 "$EIP" || fail "$EIP is not routed to eip0 after ADD B"
n=$(holders "$EIP")
[[ $n -eq 2 ]] || fail "$EIP has $n holders after ADD B, want 2"
show_route
show_holders
ok "$EIP is routed to eip0 once, held by 2 attachments (A and B)"

heading "6. CHECK both attachments"
for pair in "A $CTRA" "B $CTRB"; do
  read -r name ctr <<<"$pair"
  cmd "CAP_ARGS='$CAPS' ip netns exec $NODE cnitool check $NET /var/run/netns/$ctr"
  out=$(CAP_ARGS="$CAPS" ip netns exec "$NODE" "$BIN/cnitool" check "$NET" "/var/run/netns/$ctr" 2>&1) ||
    fail "cnitool check for container $name: $out"
  ok "CHECK of container $name passed"
done

if ((capture)); then
  heading "7. Gratuitous ARP and unsolicited NA the LAN saw during the ADDs (tcpdump on $LAN lan0)"
  # The later rounds (3 rounds per ADD, 1.1 s apart) reach the wire after
  # ADD has returned: wait for them, at most 4 s after ADD B.
  want=6
  deadline=$(awk -v t="$added_b" 'BEGIN { printf "%.3f", t + 4 }')
  while :; do
    count_garp
    ((requests >= want && replies >= want && nas >= want)) && break
    awk -v d="$deadline" -v now="$(date +%s.%N)" 'BEGIN { exit !(now > d) }' && break
    sleep 0.2
  done
  kill -INT "$capture_pid"
  wait "$capture_pid" 2>/dev/null || true
  capture_pid=
  count_garp
  cmd "ip netns exec $LAN tcpdump -i lan0 -n -e 'arp or icmp6'   (time since the first frame)"
  grep -E "who-has $EIP tell|Reply $EIP is-at|advertisement, tgt is $EIP6,|solicitation, who has $EIP6," "$WORK/lan.txt" |
    sed -E 's/^ +//; s/ethertype (ARP|IPv6) \(0x[0-9a-f]+\), length [0-9]+: //; s/, length [0-9]+$//' | indent
  if grep -q "Request who-has $EIP tell 0.0.0.0" "$WORK/lan.txt"; then
    say "(the conflict probe, RFC 5227, sent once before $EIP is first taken: the question from 0.0.0.0, then"
    say " the same from the node's own $NODE_IP, which a proxy ARP entry answers where a probe from 0.0.0.0 is not;"
    say " for $EIP6, the neighbour solicitation from :: is its duplicate address detection)"
  fi
  ((requests >= want && replies >= want)) ||
    fail "the LAN saw $requests gratuitous ARP requests and $replies replies for $EIP from $NODE_MAC, want $want of each (3 rounds for each ADD)"
  ((nas >= want)) ||
    fail "the LAN saw $nas unsolicited neighbour advertisements for $EIP6 from $NODE_MAC, want $want (3 rounds for each ADD)"
  ok "$requests gratuitous ARP requests and $replies replies, and $nas unsolicited NAs to ff02::1, from the node's uplink0 $NODE_MAC: 3 rounds per ADD, 1.1 s apart, the first before ADD returned"
else
  heading "7. Gratuitous ARP (skipped: tcpdump is not installed; make deps installs it)"
fi

heading "8. The LAN reaches $EIP and $EIP6 at the node's MAC"
cmd "ip netns exec $LAN ping -c1 -W2 $EIP"
ip netns exec "$LAN" ping -c1 -W2 "$EIP" | indent || fail "the LAN cannot ping $EIP"
cmd "ip -n $LAN neigh show $EIP"
ip -n "$LAN" neigh show "$EIP" | indent
ip -n "$LAN" neigh show "$EIP" | grep -q "lladdr $NODE_MAC" ||
  fail "the LAN's neighbour cache does not map $EIP to the node's uplink MAC $NODE_MAC"
ok "the LAN maps $EIP to $NODE_MAC (the node's uplink0): its proxy entry answered, although arp_ignore is 1"
cmd "ip netns exec $LAN ping -6 -c1 -W2 $EIP6"
ip netns exec "$LAN" ping -6 -c1 -W2 "$EIP6" | indent || fail "the LAN cannot ping $EIP6"
cmd "ip -n $LAN neigh show $EIP6"
ip -n "$LAN" neigh show "$EIP6" | indent
ip -n "$LAN" neigh show "$EIP6" | grep -q "lladdr $NODE_MAC" ||
  fail "the LAN's neighbour cache does not map $EIP6 to the node's uplink MAC $NODE_MAC"
ok "the LAN maps $EIP6 to $NODE_MAC: the proxy NDP entry answered its neighbour solicitation"

# listen NS PORT: one TCP connection's peer address, printed by nc -v, into
# $WORK/seen.NS; the line "Connection received on ADDR PORT" names it.
listen() {
  ip netns exec "$1" timeout 10 nc -n -v -l "$2" >/dev/null 2>"$WORK/seen.$1" &
  for _ in $(seq 50); do
    grep -q Listening "$WORK/seen.$1" 2>/dev/null && return
    sleep 0.1
  done
  fail "nc did not start listening in $1"
}
seen() { # seen NS: the peer address nc reported, waiting up to 5 s
  for _ in $(seq 50); do
    grep -q 'Connection received' "$WORK/seen.$1" 2>/dev/null && break
    sleep 0.1
  done
  awk '/Connection received on/ { print $4 }' "$WORK/seen.$1"
}

heading "9. Traffic: the LAN reaches the containers at $EIP, and A leaves from it"
say "table inet external-ip, the parts that steer $EIP (the whole table: nft list table inet external-ip):"
for part in "chain inet external-ip to-$EIP" "map inet external-ip sp-$EIP" "map inet external-ip snat4"; do
  cmd "ip netns exec $NODE nft list $part"
  ip netns exec "$NODE" nft list $part | grep -v -E '^(table|\}|\s*\}$)' | indent
done
say "(new flows to $EIP take turns over A and B; A's and B's flows out of uplink0 leave from $EIP)"
say "servers: nc -l 8080 in A and in B; two connections from the LAN host to $EIP:8080"
listen "$CTRA" 8080
listen "$CTRB" 8080
for _ in 1 2; do
  cmd "echo hello | ip netns exec $LAN nc -N -w2 $EIP 8080"
  echo hello | ip netns exec "$LAN" nc -n -N -w2 "$EIP" 8080 || fail "the LAN's connection to $EIP:8080 failed"
done
for pair in "A $CTRA" "B $CTRB"; do
  read -r name ctr <<<"$pair"
  from=$(seen "$ctr")
  [[ $from == "$LAN_IP" ]] || fail "container $name saw no connection from the LAN host $LAN_IP (saw: '$from')"
  ok "container $name accepted a connection to $EIP, from the LAN host's own address $from"
done
say "server: nc -l 9090 on the LAN host; container A connects to it (the bridge's ipMasq is on)"
listen "$LAN" 9090
cmd "echo hello | ip netns exec $CTRA nc -N -w2 $LAN_IP 9090"
echo hello | ip netns exec "$CTRA" nc -n -N -w2 "$LAN_IP" 9090 || fail "container A's connection to the LAN failed"
from=$(seen "$LAN")
[[ $from == "$EIP" ]] || fail "A's connection reached the LAN from '$from', want $EIP (ipMasq would give $NODE_IP)"
ok "A's connection arrived on the LAN from $EIP, not from the node's $NODE_IP"

heading "10. DEL container A: B still holds $EIP"
del A "$CTRA"
on_eip0 "$EIP" || fail "$EIP left eip0 although container B still holds it"
n=$(holders "$EIP")
[[ $n -eq 1 ]] || fail "$EIP has $n holders after DEL A, want 1"
show_route
ok "$EIP is still routed to eip0, held by 1 attachment"

heading "11. DEL container B: nobody holds $EIP"
del B "$CTRB"
for ip in "$EIP" "$EIP6"; do
  gone "$ip" || fail "$ip is still routed to eip0 or proxied after the last holder's DEL"
done
n=$(holders "$EIP")
[[ $n -eq 0 ]] || fail "$EIP has $n holders after DEL B, want 0"
show_route
ok "the routes and proxy entries of $EIP and $EIP6 are gone"
if ip netns exec "$NODE" nft list table inet external-ip | grep -q "$EIP"; then
  fail "table inet external-ip still steers $EIP after the last DEL"
fi
ok "table inet external-ip steers $EIP no more"

heading "12. The same IP held as an address (\"hold\": \"address\") on this strictARP node"
ADDR_NET=eip-demo-address
jq --arg net "$ADDR_NET" '.name = $net | .plugins[0].bridge = "cni-demo-addr" |
  .plugins[0].ipam.ranges = [[{subnet: "10.89.0.0/24"}]] | .plugins[1].hold = "address"' \
  "$NETCONFPATH/$NET.conflist" >"$NETCONFPATH/$ADDR_NET.conflist"
cmd "CAP_ARGS='{\"externalIPs\":[\"$EIP\"]}' ip netns exec $NODE cnitool add $ADDR_NET /var/run/netns/$CTRA"
if out=$(CAP_ARGS="{\"externalIPs\":[\"$EIP\"]}" ip netns exec "$NODE" "$BIN/cnitool" add "$ADDR_NET" "/var/run/netns/$CTRA" 2>&1); then
  fail "ADD with hold address succeeded on a node with arp_ignore 1, where the LAN could not reach the address"
fi
grep -m1 'failed (add)' <<<"$out" | indent
grep -q "arp_ignore is 1" <<<"$out" || fail "the refusal does not name arp_ignore: $out"
gone "$EIP" || fail "the refused ADD left $EIP on the node"
ok "refused (CNI code 102), naming the sysctl: the kernel answers ARP for an address only while arp_ignore is 0"

heading "Demo passed; removing its namespaces and files"
