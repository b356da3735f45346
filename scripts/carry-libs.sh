#!/usr/bin/env bash
# Copies every shared library that the given binaries load, directly or through another library,
# into DIR, one file per soname (DIR/<soname>), except glibc's, LibTorch's and CUDA's: those the
# GPU host has of its own (its PyTorch wheel, its driver). The list is the loader's own answer on
# this machine (ldd), so it follows the build: nothing to keep up to date by hand.
#   usage: scripts/carry-libs.sh DIR FILE...
# Writes DIR/CARRIED.txt: soname, the file it was copied from, and its Debian package where dpkg
# knows it. scripts/lib-missing.sh later links into the library path only the sonames a host lacks.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR FILE..." >&2; exit 2; }
dir=$1; shift
for f in "$@"; do [ -f "$f" ] || { echo "carry-libs.sh: no such file: $f" >&2; exit 2; }; done
# glibc's sonames (its ABI, stable for decades): every Linux host has its own, matched to its loader.
glibc='^(ld-linux.*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libthread_db|libBrokenLocale|libc_malloc_debug|libmemusage|libpcprofile|libnss_[a-z0-9_]+)\.so(\.[0-9]+)*$'
# CUDA's driver and toolkit libraries: the host's driver and its wheel bring them.
cuda='^(libcuda|libnvidia-[a-z0-9-]+|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libcufft|libcurand|libcusparse|libcusolver|libnccl|libnvrtc|libnvToolsExt|libnvJitLink|libcupti|libnvjpeg)\.so(\.[0-9]+)*$'
out=$(ldd "$@" 2>&1) || true
if grep -q "not found" <<< "$out"; then
  echo "carry-libs.sh: these files lack shared libraries on this machine, so their closure is unknown:" >&2
  grep "not found" <<< "$out" | sort -u >&2
  exit 1
fi
mkdir -p "$dir"
rm -f "$dir"/*.so* "$dir/CARRIED.txt"
pairs=$(awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<< "$out" | sort -u)
kept=()
# "soname => path (address)" lines; the loader itself and the vDSO have no "=>".
while read -r soname path; do
  [[ "$soname" =~ $glibc ]] && continue
  [[ "$soname" =~ $cuda ]] && continue
  case "$path" in
    */site-packages/*|*/dist-packages/*) continue ;;  # LibTorch and the CUDA libraries of its wheel
    /usr/local/cuda*) continue ;;                      # the CUDA toolkit
  esac
  cp -L "$path" "$dir/$soname"
  kept+=("$soname $(realpath "$path")")
done <<< "$pairs"
# The Debian package of each (one dpkg call: it reads its whole database each time), for the
# prefix scripts/offline-deps.sh unpacks; "-" where dpkg does not know the file.
declare -A pkg_of=()
if command -v dpkg > /dev/null && [ ${#kept[@]} -gt 0 ]; then
  while IFS= read -r line; do
    pkg=${line%%: *} file=${line#*: }
    pkg_of[$file]=${pkg%%:*}
    pkg_of[/usr$file]=${pkg%%:*}
  done < <(dpkg -S $(printf '%s\n' "${kept[@]}" | awk '{print $2; sub("^/usr", "", $2); print $2}') 2>/dev/null | grep -v '^diversion')
fi
for k in "${kept[@]}"; do
  printf '%s\t%s\t%s\n' "${k%% *}" "${k#* }" "${pkg_of[${k#* }]:--}" >> "$dir/CARRIED.txt"
done
n=${#kept[@]}
echo "carry-libs.sh: $n libraries in $dir ($(du -sh "$dir" | cut -f1))"
