#!/usr/bin/env bash
# Removes what a recipe killed with -9 leaves behind (its processes and mounts
# are already gone with its PID/mount namespaces): the empty netns files, the
# empty cgroups and the temp dir of run ID (printed as "run id ID" at start).
#   usage: cleanup-stale.sh ID...
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: $0 RUN_ID..." >&2; exit 2; }
for id in "$@"; do
  [[ "$id" =~ ^[0-9a-f]{8}$ ]] || { echo "bad run id: $id" >&2; continue; }
  for f in /run/netns/e2e-*-"$id"; do
    [ -e "$f" ] || continue
    ip netns del "$(basename "$f")" 2>/dev/null || rm -f "$f"
  done
  # depth-first: containerd/runc leave per-container child cgroups
  find /sys/fs/cgroup/*/eip-e2e-"$id" -depth -type d -exec rmdir {} \; 2>/dev/null
  rm -rf /tmp/eip-e2e-*-"$id".*
  echo "cleaned run $id"
done
