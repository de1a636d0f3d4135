#!/usr/bin/env bash
# Builds the Kubernetes release that test/e2e/kubernetes.sh runs
# (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
# and etcd) from the Go module proxy, once, into a cache outside the clone
# keyed by the release: later runs (and CI on the same machine) find it and
# return at once. The first build takes 20 to 40 minutes on 2 cores.
#   usage: build.sh            prints the directory holding the binaries
#          build.sh --check    the same, but fails at once if they are not built
#   env:   K8S_CACHE (default /var/cache/external-ip), K8S_BUILD_LOG (default
#          $K8S_CACHE/kubernetes-VERSION.log), K8S_BUILD_P (go build -p;
#          default: Go's, the number of CPUs), K8S_BUILD_NICE (default 15)
# The build runs under nice(1) so that a shared machine keeps its CPU for
# others (or, on a busy one, K8S_BUILD_NICE=0 K8S_BUILD_P=1: one compile at
# a time at a fair share); it holds a lock, so two runs at once build once.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MOD=$HERE/build
# The release is the one go.mod requires (one place to change it).
VERSION=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ {print $2; exit}' "$MOD/go.mod")
[ -n "$VERSION" ] || { echo "build.sh: no k8s.io/kubernetes version in $MOD/go.mod" >&2; exit 1; }
CACHE=${K8S_CACHE:-/var/cache/external-ip}
OUT=$CACHE/kubernetes-$VERSION
LOG=${K8S_BUILD_LOG:-$CACHE/kubernetes-$VERSION.log}
BINS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
# What the binaries are built from: a cache built from another go.sum or
# other flags is stale even under the same release.
LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$VERSION
 -X k8s.io/component-base/version.gitMajor=1
 -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$VERSION")
 -X k8s.io/component-base/version.gitTreeState=clean
 -X k8s.io/client-go/pkg/version.gitVersion=$VERSION"
LDFLAGS=$(tr '\n' ' ' <<<"$LDFLAGS")
TAGS=providerless
KEY=$( (cat "$MOD/go.mod" "$MOD/go.sum" "$MOD/etcd/main.go"; echo "$LDFLAGS $TAGS"; go env GOVERSION) | sha256sum | cut -d' ' -f1)

source "$HERE/../build-cache.sh"

# build TMP: the binaries into TMP, one after the other, the control plane
# first: each reuses what the ones before compiled (Go's build cache), and a
# reader of the log sees how far it got.
build() {
  local tmp=$1 t0 b pkg
  echo "build.sh: building Kubernetes $VERSION and etcd into $OUT (20 to 40 minutes on 2 cores; progress in $LOG)" >&2
  t0=$(date +%s)
  # A subshell, each step checked: set -e does not apply left of ||.
  (
    echo "== $(date -u +%FT%TZ) build of $VERSION, key $KEY, $(go version)"
    # -trimpath and no cgo, as the release's static binaries are; -v names
    # each package as it is compiled (the progress in the log).
    cd "$MOD" || exit 1
    for b in "${BINS[@]}"; do
      pkg=k8s.io/kubernetes/cmd/$b
      [ "$b" != etcd ] || pkg=./etcd
      CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false${K8S_BUILD_P:+ -p=$K8S_BUILD_P}" \
        nice -n "${K8S_BUILD_NICE:-15}" go build -v -trimpath -tags "$TAGS" -ldflags "$LDFLAGS" -o "$tmp/" "$pkg" || exit 1
      echo "== $(date -u +%FT%TZ) $b built at $(( $(date +%s) - t0 ))s"
    done
    echo "== $(date -u +%FT%TZ) built in $(( $(date +%s) - t0 ))s"
  ) >>"$LOG" 2>&1 || { echo "build.sh: build failed; last lines of $LOG:" >&2; tail -n 20 "$LOG" >&2; return 1; }
}

cache_build "$OUT" "$KEY" build "${1:-}" "${BINS[@]}"
