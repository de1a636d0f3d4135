#!/usr/bin/env bash
# Installs everything the e2e recipes need on a Debian 12 machine.
# Idempotent and fast when everything is already there.
#   usage: install-deps.sh [BIN_DIR]     (default: ./bin next to this script)
# Needs root (apt-get) and Go >= 1.22 on PATH (for the Go tools).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="${1:-$HERE/bin}"
mkdir -p "$BIN"
BIN="$(cd "$BIN" && pwd)"

CRICTL_VERSION=v1.34.0
CNI_VERSION=v1.3.1          # cnitool
PLUGINS_VERSION=v1.10.0     # bridge, host-local, loopback, portmap

APT_PKGS=(containerd runc podman buildah busybox-static iproute2 nftables tcpdump
          iptables jq util-linux procps psmisc uidmap prometheus curl openssl)
# --no-install-recommends: no crun (fails on this machine's hybrid cgroups),
# slirp4netns, fuse-overlayfs, catatonit. podman still pulls conmon and
# containernetworking-plugins (1.1.1, in /usr/lib/cni; the recipes use their
# own v1.10.0 builds instead). busybox-static gives the images their only
# binary, and `busybox ping` (Debian 12 minimal has no ping). tcpdump watches
# the LAN side for the plugin's probes and announcements. prometheus (and
# curl, to ask it) scrapes external-ip-node in metrics.sh; the machine's
# own prometheus service is kept from running (below). openssl makes the
# kubernetes recipe's ServiceAccount signing key.

log() { printf '[install-deps] %s\n' "$*" >&2; }
t0=$(date +%s)

missing=()
for p in "${APT_PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  log "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts containerd.service on install; the recipes run their own
  # containerd inside a netns, so make sure the system one does not run.
  if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl disable --now containerd.service >/dev/null 2>&1 || true
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
else
  log "apt: all packages present"
fi

# Unpacked under BIN/deb/PACKAGE, not installed: the critest recipe makes
# its images of them. Debian's busybox (dynamic) runs an applet from its file,
# as an image's shell does (busybox-static runs it in-process, whatever the
# file), and conflicts with busybox-static; nginx, installed, would start its
# service on the machine's port 80; catatonit is static, the images' pause.
for p in busybox nginx catatonit; do
  dir=$BIN/deb/$p
  [ ! -s "$dir/.deb" ] || continue
  log "apt: unpacking $p into $dir"
  tmp=$(mktemp -d)
  chown _apt "$tmp" 2>/dev/null || true    # apt downloads as _apt
  if ! (cd "$tmp" && apt-get download -qq "$p" >/dev/null 2>&1); then
    apt-get update -qq
    (cd "$tmp" && apt-get download -qq "$p" >/dev/null)
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  dpkg-deb -x "$tmp"/*.deb "$dir"
  (cd "$tmp" && ls -- *.deb) >"$dir/.deb"
  rm -rf "$tmp"
done

command -v go >/dev/null || { log "go not on PATH"; exit 1; }
export GOBIN="$BIN" CGO_ENABLED=0

# tool name -> module path@version
declare -A TOOLS=(
  [crictl]="sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  [cnitool]="github.com/containernetworking/cni/cnitool@$CNI_VERSION"
  [bridge]="github.com/containernetworking/plugins/plugins/main/bridge@$PLUGINS_VERSION"
  [host-local]="github.com/containernetworking/plugins/plugins/ipam/host-local@$PLUGINS_VERSION"
  [loopback]="github.com/containernetworking/plugins/plugins/main/loopback@$PLUGINS_VERSION"
  [portmap]="github.com/containernetworking/plugins/plugins/meta/portmap@$PLUGINS_VERSION"
)
for t in crictl cnitool bridge host-local loopback portmap; do
  want="${TOOLS[$t]}"
  stamp="$BIN/.$t.version"
  if [ -x "$BIN/$t" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    continue
  fi
  log "go install $want"
  # pkg@version runs outside any module: the main module's go.mod is never touched
  (cd / && GOFLAGS='' go install "$want")
  echo "$want" >"$stamp"
done
log "go tools present in $BIN ($(find "$BIN" -maxdepth 1 -type f -perm -u+x -printf '%f '))"
log "done in $(( $(date +%s) - t0 ))s"
