# shellcheck shell=bash
# The build cache of kubernetes/build.sh and critest/build.sh. Source it.
# Each keeps binaries that take minutes to build in a directory outside the
# clone, with the key they were built under: a hash of all they are built
# from, so that a cache built from anything else is stale and built again.
# Two runs that ask at once build once (a lock beside the directory).

# cache_build OUT KEY BUILD MODE BIN...: prints OUT, at once when it holds
# every BIN built under KEY. Otherwise fails if MODE is --check; else takes
# the lock OUT.lock, runs BUILD TMP (a command that puts every BIN into the
# new directory TMP, beside OUT, and fails saying why), and moves TMP to OUT
# with the key.
cache_build() {
  local out=$1 key=$2 build=$3 mode=$4 tmp b t0
  shift 4
  if cache_holds "$out" "$key" "$@"; then echo "$out"; return 0; fi
  if [ "$mode" = --check ]; then
    echo "$0: ${out##*/} is not built in $out: run $0" >&2
    return 1
  fi
  mkdir -p "${out%/*}"
  exec 9>"$out.lock"
  if ! flock -n 9; then
    echo "$0: another build of ${out##*/} is running; waiting" >&2
    flock 9
  fi
  if cache_holds "$out" "$key" "$@"; then echo "$out"; return 0; fi
  t0=$(date +%s)
  tmp=$(mktemp -d "${out%/*}/.${out##*/}.XXXX")
  # shellcheck disable=SC2064 # the path now: tmp is gone when the trap runs
  trap "rm -rf '$tmp'" EXIT
  "$build" "$tmp" || return 1
  for b; do [ -x "$tmp/$b" ] || { echo "$0: no $b built" >&2; return 1; }; done
  echo "$key" >"$tmp/.key"
  rm -rf "$out"
  mv "$tmp" "$out"
  chmod 0755 "$out"
  echo "$0: built in $(( $(date +%s) - t0 ))s" >&2
  echo "$out"
}

# cache_holds OUT KEY BIN...: OUT holds every BIN, built under KEY.
cache_holds() {
  local out=$1 key=$2 b
  shift 2
  [ "$(cat "$out/.key" 2>/dev/null)" = "$key" ] || return 1
  for b; do [ -x "$out/$b" ] || return 1; done
}
