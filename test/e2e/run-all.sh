#!/usr/bin/env bash
# The end-to-end acceptance suite: installs what it needs (install-deps.sh,
# idempotent), then runs each recipe with external-ip in the chain, one after
# the other, then checks that each recipe left nothing behind.
#   usage: run-all.sh [RECIPE...]     (default: cnitool containerd-cri podman-cni installer metrics critest claims kubernetes)
#   env:   PLUGIN (default bin/external-ip; built with `make build` if
#          missing), E2E_BIN (default test/e2e/bin), E2E_TIMEOUT (per recipe,
#          default 90 s), E2E_SKIP_DEPS=1 (do not run install-deps.sh),
#          E2E_KEEP=1, E2E_OUT_DIR=DIR (keep the recorder logs), IMAGE_TAR
#          (the installer image, default bin/external-ip-image.tar; built
#          with `make image` if missing), E2E_K8S_TIMEOUT (the kubernetes
#          and claims recipes' bound, default 1200 s; their Kubernetes build,
#          20 to 40 minutes the first time and cached after, comes before
#          them, unbounded), E2E_CRITEST_TIMEOUT (the critest recipe's bound,
#          default 900 s; its build of critest, 3 to 4 minutes the first time
#          and cached after, comes before it, unbounded)
# Output: every recipe's PASS/FAIL lines, a summary per recipe, and as the
# last line "N passed, N failed" (checks, over all recipes). Exit status 1 if
# anything failed.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
export E2E_BIN="${E2E_BIN:-$HERE/bin}"
export E2E_TIMEOUT="${E2E_TIMEOUT:-90}"
export PLUGIN="${PLUGIN:-$ROOT/bin/external-ip}"
recipes=("$@"); [ ${#recipes[@]} -gt 0 ] || recipes=(cnitool containerd-cri podman-cni installer metrics critest claims kubernetes)
recipes=("${recipes[@]%.sh}")
T0=$(date +%s.%N)
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

[ "$(id -u)" = 0 ] || { echo "run-all.sh: run as root" >&2; echo "0 passed, 1 failed"; exit 1; }
if [ "${E2E_SKIP_DEPS:-}" != 1 ]; then
  timeout 900 "$HERE/install-deps.sh" "$E2E_BIN" || { echo "FAIL run-all: install-deps.sh"; echo "0 passed, 1 failed"; exit 1; }
fi
if { [ ! -x "$PLUGIN" ] || [ ! -x "$ROOT/bin/external-ip-node" ]; } && [ "$PLUGIN" = "$ROOT/bin/external-ip" ]; then
  make -C "$ROOT" build >&2 || { echo "FAIL run-all: make build"; echo "0 passed, 1 failed"; exit 1; }
fi
export IMAGE_TAR="${IMAGE_TAR:-$ROOT/bin/external-ip-image.tar}"
if [[ " ${recipes[*]} " == *" installer "* || " ${recipes[*]} " == *" kubernetes "* ]] && [ ! -f "$IMAGE_TAR" ]; then
  make -C "$ROOT" image >&2 || { echo "FAIL run-all: make image"; echo "0 passed, 1 failed"; exit 1; }
fi

# The Kubernetes release the kubernetes and claims recipes run: built once
# (20 to 40 minutes on 2 cores), then cached outside the clone
# (kubernetes/build.sh).
if [[ " ${recipes[*]} " == *" kubernetes "* || " ${recipes[*]} " == *" claims "* ]]; then
  t0=$(date +%s.%N)
  "$HERE/kubernetes/build.sh" >/dev/null || { echo "FAIL run-all: test/e2e/kubernetes/build.sh"; echo "0 passed, 1 failed"; exit 1; }
  echo "kubernetes: binaries ready in $(since "$t0")s" >&2
fi

# critest (cri-tools' CRI validation suite) and what its images need from
# Go: built once, then cached outside the clone (critest/build.sh).
if [[ " ${recipes[*]} " == *" critest "* ]]; then
  t0=$(date +%s.%N)
  "$HERE/critest/build.sh" >/dev/null || { echo "FAIL run-all: test/e2e/critest/build.sh"; echo "0 passed, 1 failed"; exit 1; }
  echo "critest: binaries ready in $(since "$t0")s" >&2
fi

RESULTS=$(mktemp -d /tmp/eip-e2e-results.XXXX)
trap 'rm -rf "$RESULTS"' EXIT
pass=0 fail=0 summary=()

# The "Deploying with" sections of README.md show the examples inline, each
# after a line <!-- conflist: FILE -->: they must not go stale.
readme_conflists() {
  local readme=$HERE/README.md f n=0 bad=()
  for f in $(sed -n 's/^<!-- conflist: \(.*\) -->$/\1/p' "$readme"); do
    n=$((n + 1))
    if ! diff <(awk -v m="<!-- conflist: $f -->" '$0 == m {s = 1; next}
                  s == 1 && /^```/ {s = 2; next} s == 2 && /^```/ {exit} s == 2' "$readme" | jq -S . 2>&1) \
              <(jq -S . "$ROOT/conflist-examples/$f" 2>&1) >/dev/null; then
      bad+=("$f")
    fi
  done
  if [ "$n" -gt 0 ] && [ ${#bad[@]} = 0 ]; then
    echo "PASS readme: the $n conflists shown in test/e2e/README.md are those in conflist-examples/"
  else
    echo "FAIL readme: test/e2e/README.md shows stale or missing conflists: ${bad[*]:-none found}"
  fi
}
readme_conflists | tee "$RESULTS/readme"
pass=$(grep -c '^PASS ' "$RESULTS/readme") fail=$(grep -c '^FAIL ' "$RESULTS/readme")
for r in "${recipes[@]}"; do
  r=${r%.sh}
  id=$(printf '%04x%04x' $RANDOM $RANDOM)
  res=$RESULTS/$r
  : >"$res"
  t0=$(date +%s.%N)
  # The recipe bounds itself (E2E_TIMEOUT, then SIGKILL 30 s later); this is
  # a backstop.
  limit=$E2E_TIMEOUT
  [ "$r" != kubernetes ] && [ "$r" != claims ] || limit=${E2E_K8S_TIMEOUT:-1200}
  [ "$r" != critest ] || limit=${E2E_CRITEST_TIMEOUT:-900}
  E2E_ID=$id E2E_RESULTS=$res E2E_TIMEOUT=$limit timeout -k 5 $((limit + 45)) "$HERE/$r.sh"
  rc=$?
  if [ "$rc" != 0 ] && ! grep -q '^FAIL ' "$res"; then
    echo "FAIL $r: exited with status $rc without a FAIL line (killed?)" | tee -a "$res"
  fi
  # Nothing may be left of the run: netns, temp dir, cgroups, mounts.
  left=$(
    ls -d /run/netns/e2e-*-"$id" 2>/dev/null
    [ "${E2E_KEEP:-}" = 1 ] || ls -d /tmp/eip-e2e-*-"$id".* 2>/dev/null
    ls -d /sys/fs/cgroup/*/eip-e2e-"$id" 2>/dev/null
    grep -F -- "-$id" /proc/self/mountinfo | awk '{print $5}'
  )
  if [ -z "$left" ]; then
    echo "PASS $r: nothing left behind (netns, temp dir, cgroups, mounts of run $id)" | tee -a "$res"
  else
    echo "FAIL $r: left behind: $(echo "$left" | tr '\n' ' ')" | tee -a "$res"
    "$HERE/cleanup-stale.sh" "$id" >&2
  fi
  p=$(grep -c '^PASS ' "$res") f=$(grep -c '^FAIL ' "$res")
  pass=$((pass + p)) fail=$((fail + f))
  summary+=("$(printf '%-16s %-4s %3d passed %3d failed %6ss' "$r" "$([ "$f" = 0 ] && echo PASS || echo FAIL)" "$p" "$f" "$(since "$t0")")")
done
printf '%s\n' "${summary[@]}"
grep -h '^FAIL ' "$RESULTS"/* 2>/dev/null
echo "total $(since "$T0")s"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
