#!/usr/bin/env bash
# Builds the installer image (Containerfile) with buildah from Debian's
# package and writes it as an OCI archive, for `podman load -i` or
# `ctr -n k8s.io images import`. Nothing is downloaded but the package: the
# image is FROM scratch with the static binary that `make build` made.
#   usage: image.sh BINARY IMAGE_REF VERSION REVISION OUT.tar
set -euo pipefail
bin=$1 ref=$2 version=$3 revision=$4 out=$5
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if ! command -v buildah >/dev/null; then
  echo "image: installing buildah"
  export DEBIAN_FRONTEND=noninteractive
  flock /tmp/eip-apt.lock sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends buildah >/dev/null'
fi
file "$bin" 2>/dev/null | grep -q 'statically linked' || ! command -v file >/dev/null ||
  { echo "image: $bin is not statically linked; the image has no libc" >&2; exit 1; }

# Own storage (vfs: no overlay mounts needed), so the machine's image store
# and its storage driver are never touched; removed when done.
store=$(mktemp -d /tmp/eip-image.XXXX)
trap 'rm -rf "$store"' EXIT
b=(buildah --root "$store/root" --runroot "$store/run" --storage-driver vfs)
ctx=$store/context
mkdir -p "$ctx/bin"
cp "$bin" "$ctx/bin/external-ip"
# The node build with metrics sits beside the plugin (make build makes both).
cp "$(dirname "$bin")/external-ip-node" "$ctx/bin/external-ip-node"
"${b[@]}" build --quiet --layers=false --format oci -f "$root/Containerfile" \
  --build-arg "VERSION=$version" --build-arg "REVISION=$revision" -t "$ref" "$ctx" >/dev/null
rm -f "$out"
"${b[@]}" push --quiet "$ref" "oci-archive:$out:$ref" >/dev/null
echo "image: $ref ($version) -> $out"
