#!/usr/bin/env bash
# The test of the prebuilt route's libraries (ctest runs it): on a host that lacks libpq.so.5 and
# the libldap and liblber it needs (the first H200 run's host), the prebuilt binary does not start
# on its own, scripts/lib-missing.sh links exactly those three from what scripts/carry-libs.sh
# carried, the binary then starts, and libssl.so.3, carried too (libpq needs it) but present on
# the host, still comes from the host.
#   usage: scripts/check-lib-missing.sh TRAINBENCH
# The host without the three: a private mount namespace (unshare --mount, so root) in which the
# system library folder is replaced by a folder of links to each of its entries but those three
# (the real folder is bind-mounted a second time, elsewhere, for the links to point to). The loader
# then sees the libraries as absent, as on that host, not as broken files, and nothing outside the
# namespace sees any of it. Where mount namespaces cannot be made (no root), the test says so and
# counts as skipped.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 TRAINBENCH" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
tb=$(realpath "$1")
victims=(libpq.so.5 libldap-2.5.so.0 liblber-2.5.so.0)
fail() { echo "FAILED: $*"; exit 1; }

if [ -z "${CHECK_LIB_MISSING_INSIDE:-}" ]; then
  unshare --mount true 2> /dev/null ||
    { echo "trainbench_test_skipped: cannot make a mount namespace here (unshare --mount needs root)"; exit 0; }
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/trainbench-lib-missing.XXXXXX")
  # Removed from outside the namespace only, where nothing is mounted under it.
  trap 'rm -rf --one-file-system "$tmp"' EXIT
  "$here/carry-libs.sh" "$tmp/carried" "$tb"
  for v in "${victims[@]}" libssl.so.3; do
    [ -f "$tmp/carried/$v" ] || fail "$v is not among the carried libraries (carry-libs.sh): $(cut -f1 "$tmp/carried/CARRIED.txt" | tr '\n' ' ')"
  done
  # On this machine, which has every library, nothing is linked.
  "$here/lib-missing.sh" "$tmp/carried" "$tmp/none" "$tb"
  [ -z "$(ls -A "$tmp/none")" ] || fail "links made on a host that has every library: $(ls "$tmp/none")"
  CHECK_LIB_MISSING_INSIDE=1 CHECK_TMP=$tmp unshare --mount bash "$0" "$tb"
  echo "passed"
  exit 0
fi

# Inside the namespace.
tmp=$CHECK_TMP
libdir=$(dirname "$(realpath "$(ldd "$tb" | awk '$1 == "libpq.so.5" {print $3}')")")
[ -d "$libdir" ] || fail "the binary does not load libpq.so.5 here"
mkdir "$tmp/real" "$tmp/farm"
mount --bind "$libdir" "$tmp/real"
for entry in "$tmp/real"/* "$tmp/real"/.[!.]*; do
  [ -e "$entry" ] || [ -L "$entry" ] || continue
  name=$(basename "$entry")
  case "$name" in libpq.so*|libldap-2.5.so*|liblber-2.5.so*) continue ;; esac
  ln -s "$entry" "$tmp/farm/$name"
done
mount --bind "$tmp/farm" "$libdir"

# 1. Without the carried libraries the binary does not start, for want of libpq.
if out=$("$tb" --version 2>&1); then fail "trainbench started without libpq.so.5: $out"; fi
grep -q "libpq.so.5: cannot open shared object file" <<< "$out" || fail "not the missing libpq: $out"
echo "without the carried libraries: $out"
# 2. lib-missing.sh links the three, found in two passes (libldap and liblber only once libpq is there).
"$here/lib-missing.sh" "$tmp/carried" "$tmp/lm" "$tb" 2>&1 || fail "lib-missing.sh failed"
linked=$(ls -A "$tmp/lm" | sort | tr '\n' ' ')
want=$(printf '%s\n' "${victims[@]}" | sort | tr '\n' ' ')
[ "$linked" = "$want" ] || fail "linked '$linked', expected '$want'"
# 3. With them, it starts.
out=$(LD_LIBRARY_PATH="$tmp/lm${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tb" --version 2>&1) ||
  fail "trainbench did not start with $tmp/lm on LD_LIBRARY_PATH: $out"
grep -q "^trainbench " <<< "$out" || fail "unexpected --version output: $out"
echo "with them: $(head -1 <<< "$out")"
# 4. What the loader took: the three from the links, libssl from the host, not the carried copy.
resolved=$(LD_LIBRARY_PATH="$tmp/lm${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$tb")
for v in "${victims[@]}"; do
  grep -q "^[[:space:]]*$v => $tmp/lm/$v " <<< "$resolved" || fail "$v not from $tmp/lm: $(grep "$v" <<< "$resolved")"
done
ssl=$(awk '$1 == "libssl.so.3" {print $3}' <<< "$resolved")
[ -n "$ssl" ] || fail "libssl.so.3 is not loaded (libpq needs it)"
case "$ssl" in "$tmp"/*) fail "libssl.so.3 shadowed by the carried copy: $ssl" ;; esac
echo "libssl.so.3 from the host: $ssl"
