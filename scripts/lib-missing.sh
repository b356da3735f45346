#!/usr/bin/env bash
# On the host that runs prebuilt binaries: links into DIR the carried libraries (scripts/carry-libs.sh)
# of the sonames this host's loader cannot find, and nothing else, so that putting DIR on
# LD_LIBRARY_PATH adds what is missing without shadowing any library the host has (its libssl, its
# libstdc++). The loader decides (ldd with the current LD_LIBRARY_PATH, DIR in front), pass after
# pass until nothing is missing: a carried library's own needs (libpq's libldap) appear only once
# it is found.
#   usage: scripts/lib-missing.sh CARRIED DIR FILE...
# CARRIED: a folder holding files (or links) named by soname, or several separated by ':' (the build
# route's prefix has two: usr/lib/x86_64-linux-gnu and lib/x86_64-linux-gnu).
# Prints one line per soname linked; exits 1, naming them, when a soname is missing that CARRIED
# lacks (say, LibTorch's: LD_LIBRARY_PATH must name the wheel's library folders first).
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 CARRIED DIR FILE..." >&2; exit 2; }
IFS=: read -r -a pools <<< "$1"
dir=$2; shift 2
for p in "${pools[@]}"; do
  [ -d "$p" ] || { echo "lib-missing.sh: no folder $p (scripts/carry-libs.sh makes it)" >&2; exit 2; }
done
for f in "$@"; do [ -f "$f" ] || { echo "lib-missing.sh: no such file: $f" >&2; exit 2; }; done
mkdir -p "$dir"
dir=$(realpath "$dir")
find "$dir" -maxdepth 1 -type l -delete
export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
linked=0
# At most one pass per carried library, and one more to see that nothing is left.
for _ in $(seq 0 "$(find "${pools[@]}" -maxdepth 1 -name '*.so*' | wc -l)"); do
  # ldd exits non-zero when a file is not a dynamic executable; the lines are what counts.
  missing=$( (ldd "$@" 2>/dev/null || true) | awk '$2 == "=>" && $3 == "not" {print $1}' | sort -u)
  [ -z "$missing" ] && break
  uncarried=()
  for soname in $missing; do
    if [ -e "$dir/$soname" ]; then
      echo "lib-missing.sh: $soname is linked, but the loader still cannot use it: $(realpath "$dir/$soname")" >&2
      exit 1
    fi
    found=""
    for p in "${pools[@]}"; do [ -e "$p/$soname" ] && { found=$(realpath "$p/$soname"); break; }; done
    if [ -n "$found" ]; then
      ln -s "$found" "$dir/$soname"
      echo "the host lacks $soname: linked to $found"
      linked=$((linked + 1))
    else
      uncarried+=("$soname")
    fi
  done
  if [ ${#uncarried[@]} -gt 0 ]; then
    echo "lib-missing.sh: the host lacks ${uncarried[*]}, which ${pools[*]} do(es) not carry" >&2
    exit 1
  fi
done
if [ $linked = 0 ]; then
  echo "lib-missing.sh: the host has every library the files load; nothing linked"
else
  echo "lib-missing.sh: the host lacks $linked of the carried libraries; $dir links them"
fi
