#!/usr/bin/env bash
# Builds critest, cri-tools' CRI validation suite (a Go test binary: `go test
# -c ./cmd/critest`), and the ginkgo CLI that runs it on several nodes at
# once, both at the versions cri-tools' go.mod pins, from the Go module
# proxy, and nnp, the one program of critest's images that Debian has no
# package for, once, into a cache outside the clone keyed by what they are
# built from: later runs (and CI on the same machine) find them and return
# at once. The first build takes 3 to 4 minutes on 2 cores.
#   usage: build.sh            prints the directory holding critest, ginkgo and nnp
#          build.sh --check    the same, but fails at once if they are not built
#   env:   CRITEST_CACHE (default /var/cache/external-ip, where the
#          Kubernetes build goes too), CRITEST_BUILD_NICE (default 15)
# Under nice(1); with a lock, so two runs at once build once (build-cache.sh).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION=v1.34.0
MODULE=sigs.k8s.io/cri-tools
CACHE=${CRITEST_CACHE:-/var/cache/external-ip}
OUT=$CACHE/critest-$VERSION
BINS=(critest ginkgo nnp)
LDFLAGS="-s -w -X $MODULE/pkg/version.Version=$VERSION"

# Kubernetes' test/images/nonewprivs/nnp.go, the image
# registry.k8s.io/e2e-test-images/nonewprivs runs (setuid root): what the
# NoNewPrivs specs read back is the effective uid it starts with.
NNP='package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}'

# The module as the proxy serves it (its Sum is the hash of its whole
# content, go.sum included), the flags, nnp's source and the Go release: a
# cache built from anything else is stale.
info=$(cd / && GOFLAGS='' go mod download -json "$MODULE@$VERSION") \
  || { echo "build.sh: go mod download $MODULE@$VERSION failed: $info" >&2; exit 1; }
SRC=$(jq -r .Dir <<<"$info")
KEY=$( (jq -r .Sum <<<"$info"; echo "$LDFLAGS"; echo "$NNP"; go env GOVERSION) | sha256sum | cut -d' ' -f1)

source "$HERE/../build-cache.sh"

# build TMP: critest, ginkgo and nnp into TMP. critest and ginkgo in the
# module's own directory of the module cache (read-only; the outputs go to
# TMP): its go.mod and go.sum pin every dependency.
build() {
  local tmp=$1 nice=(nice -n "${CRITEST_BUILD_NICE:-15}")
  echo "build.sh: building critest $VERSION, ginkgo and nnp into $OUT (3 to 4 minutes on 2 cores)" >&2
  export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
  (cd "$SRC" && "${nice[@]}" go test -c -trimpath -ldflags "$LDFLAGS" -o "$tmp/critest" ./cmd/critest) || return 1
  (cd "$SRC" && "${nice[@]}" go build -trimpath -ldflags "-s -w" -o "$tmp/ginkgo" github.com/onsi/ginkgo/v2/ginkgo) || return 1
  mkdir "$tmp/nnp-src"
  printf '%s\n' "$NNP" >"$tmp/nnp-src/nnp.go"
  printf 'module nnp\n\ngo 1.22\n' >"$tmp/nnp-src/go.mod"
  (cd "$tmp/nnp-src" && go build -trimpath -ldflags "-s -w" -o "$tmp/nnp" .) || return 1
  rm -rf "$tmp/nnp-src"
}

cache_build "$OUT" "$KEY" build "${1:-}" "${BINS[@]}"
