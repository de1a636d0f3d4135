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
# test/netns's routed fabric runs FRR's zebra and bgpd, and BIRD 2, in
# network namespaces (docs/routed-fabrics.md).
[[ -x /usr/lib/frr/zebra && -x /usr/lib/frr/bgpd ]] || need+=(frr)
have bird || need+=(bird2)
# deploy/kubernetes's tests evaluate the alerts with promtool (Debian's
# prometheus; its service is kept from starting, as FRR's and BIRD's).
have promtool || need+=(prometheus)

if ((${#need[@]})); then
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # FRR's and BIRD's packages start their default instance, which the tests
  # do not want (they run their own daemons in namespaces): a policy-rc.d
  # of our own, made only where there is none, refuses every start while
  # they are installed.
  policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\n# external-ip scripts/deps.sh: no service starts while it installs\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get update -qq
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
