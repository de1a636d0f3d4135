#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo use, only when missing,
# so that a machine that already has them pays nothing.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have ip      || need+=(iproute2)
have ping    || need+=(iputils-ping)
have sysctl  || need+=(procps)
have tcpdump || need+=(tcpdump)
have jq      || need+=(jq)
# The reference bridge plugin in the example chains calls iptables.
have iptables || need+=(iptables)
# pkg/nat's tests read our table back with nft.
have nft || need+=(nftables)
# The demo's servers and clients.
have nc || need+=(netcat-openbsd)
# test/netns lists the conntrack entries steering leaves (and must not).
have conntrack || need+=(conntrack)
# test/netns counts the plugin's netlink requests with strace.
have strace || need+=(strace)

if ((${#need[@]})); then
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
