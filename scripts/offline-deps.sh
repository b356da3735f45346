#!/usr/bin/env bash
# Run on the development machine (Debian 12, network to the Debian archive), after a build. Prepares
# what an offline GPU host needs beyond its own PyTorch wheel, in DIR:
#   DIR/prefix/   the Debian -dev packages trainbench builds with, and the runtime packages of every
#                 library the binaries load, unpacked with dpkg -x (a prefix CMake can search:
#                 scripts/gpu-check.sh --deps DIR)
#   DIR/prebuilt/ the binaries built here (scripts/gpu-check.sh --prebuilt DIR), to skip the build:
#                 trainbench, trainbench_tests, trainbench_crop_check (the fused crop kernel against
#                 its CPU reference without LibTorch, for compute-sanitizer; CUDA builds), modules/
#                 (the test modules: the NVTX recorder, the preload that kills a ladder's child),
#                 libs/ (every library they load that is not glibc, LibTorch or CUDA, one file per
#                 soname: scripts/carry-libs.sh), and nvjpeg/libnvjpeg.so.13
# On the host, scripts/lib-missing.sh puts on the library path only the carried sonames the host
# lacks (the first H200 run's host had no libpq, libldap or liblber), never one it has (its libssl).
#   usage: scripts/offline-deps.sh DIR [--no-prebuilt]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 DIR [--no-prebuilt]" >&2; exit 2; }
dir=$(realpath -m "$1")
prebuilt=1
[ "${2:-}" = "--no-prebuilt" ] && prebuilt=0
command -v apt-get >/dev/null || { echo "offline-deps.sh: needs apt-get (Debian 12)" >&2; exit 2; }
[ -x build/trainbench ] && [ -x build/tests/trainbench_tests ] ||
  { echo "offline-deps.sh: build first (scripts/setup.sh): the libraries to carry are those the binaries load" >&2; exit 1; }

# What the binaries and the test modules load, found by the loader (not a list kept by hand).
modules=(build/tests/libtrainbench_nvtx_recorder.so build/tests/libtrainbench_test_die_when_exists.so)
present_modules=()
for m in "${modules[@]}"; do [ -f "$m" ] && present_modules+=("$m"); done
closure=$(mktemp -d)
trap 'rm -rf "$closure"' EXIT
scripts/carry-libs.sh "$closure" build/trainbench build/tests/trainbench_tests "${present_modules[@]}"

# The headers and CMake files of what CMakeLists.txt finds, and the runtime package of each carried
# library (so the prefix can link: libpq's libldap must be there for the linker too).
dev=(libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 libcli11-dev zlib1g-dev libgloo-dev
     libjpeg62-turbo-dev libsqlite3-dev libpq-dev)
runtime=($(cut -f3 "$closure/CARRIED.txt" | grep -v '^-$' | sort -u))
rm -rf "$dir/debs" "$dir/prefix"
mkdir -p "$dir/debs" "$dir/prefix"
(cd "$dir/debs" && apt-get download "${dev[@]}" "${runtime[@]}" > /dev/null) ||
  { echo "offline-deps.sh: apt-get download failed (run 'apt-get update' once?)" >&2; exit 1; }
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/prefix"; done
rm -rf "$dir/prefix/usr/share/doc" "$dir/prefix/usr/share/man"
for h in yaml-cpp/yaml.h postgresql/libpq-fe.h sqlite3.h jpeglib.h spdlog/spdlog.h fmt/core.h; do
  [ -f "$dir/prefix/usr/include/$h" ] || { echo "offline-deps.sh: the prefix lacks the header $h" >&2; exit 1; }
done

if [ "$prebuilt" = 1 ]; then
  rm -rf "$dir/prebuilt"
  mkdir -p "$dir/prebuilt/modules" "$dir/prebuilt/nvjpeg"
  cp build/trainbench build/tests/trainbench_tests "$dir/prebuilt/"
  [ -x build/tests/trainbench_crop_check ] && cp build/tests/trainbench_crop_check "$dir/prebuilt/"
  [ ${#present_modules[@]} -gt 0 ] && cp "${present_modules[@]}" "$dir/prebuilt/modules/"
  cp -r "$closure" "$dir/prebuilt/libs"
  chmod 755 "$dir/prebuilt/libs"
fi
# nvJPEG for data.decode: device. torch's wheel does not depend on nvidia-nvjpeg, so a GPU host
# with only PyTorch lacks it; the copy scripts/setup.sh put beside torch's CUDA libraries travels,
# in the prefix and beside the prebuilt binaries (named by TRAINBENCH_NVJPEG, not on the path).
source scripts/env.sh
nvjpeg=$("$TRAINBENCH_PYTHON" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu13", "lib", "libnvjpeg.so.13"))' 2>/dev/null || true)
if [ -n "$nvjpeg" ] && [ -f "$nvjpeg" ]; then
  cp -L "$nvjpeg" "$dir/prefix/usr/lib/x86_64-linux-gnu/"
  [ "$prebuilt" = 1 ] && cp -L "$nvjpeg" "$dir/prebuilt/nvjpeg/"
else
  echo "offline-deps.sh: no libnvjpeg.so.13 in the venv (scripts/setup.sh installs it): device decoding will fall back to the host" >&2
fi
# The cuDNN frontend's headers for the build route (backend.compile's fused batch norm); the
# prebuilt binaries have them compiled in.
fe_include=$("$TRAINBENCH_PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)/include
if [ -f "$fe_include/cudnn_frontend.h" ]; then
  mkdir -p "$dir/prefix/usr/include"
  cp -r "$fe_include"/cudnn_frontend* "$fe_include"/cudnn_backend_base.h "$dir/prefix/usr/include/"
else
  echo "offline-deps.sh: no cudnn_frontend.h in the venv (scripts/setup.sh installs it): the fused batch norm will be off in the build route" >&2
fi
echo "offline dependencies in $dir ($(du -sh "$dir" | cut -f1), .debs $(du -sh "$dir/debs" | cut -f1)):"
echo "packages: ${dev[*]} ${runtime[*]}"
if [ "$prebuilt" = 1 ]; then
  echo "carried beside the prebuilt binaries (soname, from, package):"
  column -t -s $'\t' "$dir/prebuilt/libs/CARRIED.txt"
  (cd "$dir/prebuilt" && ls -la . modules nvjpeg)
fi
