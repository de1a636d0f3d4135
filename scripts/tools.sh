#!/usr/bin/env bash
# tools.sh [BIN_DIR]: builds into BIN_DIR (default ./bin) what the demo, the
# examples and the end-to-end tests run: cnitool, the reference plugins
# bridge, host-local and loopback, and external-ip itself.
#
# Idempotent: a reference tool is skipped when the binary present was built
# from the pinned module version (its build info says so); the plugin is
# skipped when it is newer than every Go source, go.mod and go.sum. Only the
# Go module proxy is needed (go install pkg@version).
#
# TOOLS_SKIP_PLUGIN=1 builds only the reference tools (the tests build the
# plugin themselves, with their own build tags).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${1:-$ROOT/bin}
mkdir -p "$BIN_DIR"
BIN_DIR=$(cd "$BIN_DIR" && pwd)
GO=${GO:-go}

CNI_VERSION=v1.3.1
PLUGINS_VERSION=v1.10.0

# name  package  module-version
TOOLS=(
  "cnitool    github.com/containernetworking/cni/cnitool                 $CNI_VERSION"
  "bridge     github.com/containernetworking/plugins/plugins/main/bridge $PLUGINS_VERSION"
  "host-local github.com/containernetworking/plugins/plugins/ipam/host-local $PLUGINS_VERSION"
  "loopback   github.com/containernetworking/plugins/plugins/main/loopback $PLUGINS_VERSION"
)

# built_from BIN PKG VERSION: true when BIN is a Go binary of PKG at VERSION.
built_from() {
  local info
  info=$("$GO" version -m "$1" 2>/dev/null) || return 1
  grep -qE "^[[:space:]]+path[[:space:]]+$2\$" <<<"$info" &&
    grep -qE "^[[:space:]]+mod[[:space:]]+[^[:space:]]+[[:space:]]+$3([[:space:]]|\$)" <<<"$info"
}

for line in "${TOOLS[@]}"; do
  read -r name pkg ver <<<"$line"
  if [[ -x $BIN_DIR/$name ]] && built_from "$BIN_DIR/$name" "$pkg" "$ver"; then
    continue
  fi
  echo "tools: building $name ($pkg@$ver)"
  # Outside the main module, so that its go.mod neither constrains nor
  # records these tools.
  (cd / && GOBIN="$BIN_DIR" GOFLAGS="${GOFLAGS:-} -buildvcs=false" "$GO" install "$pkg@$ver")
done

[[ ${TOOLS_SKIP_PLUGIN:-0} == 1 ]] && exit 0

plugin=$BIN_DIR/external-ip
stale=1
if [[ -x $plugin ]]; then
  newer=$(find "$ROOT/plugins" "$ROOT/pkg" "$ROOT/go.mod" "$ROOT/go.sum" \
    \( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$plugin" -print -quit)
  [[ -z $newer ]] && stale=0
fi
if ((stale)); then
  echo "tools: building external-ip"
  (cd "$ROOT" && CGO_ENABLED=0 "$GO" build -o "$plugin" ./plugins/external-ip)
fi
