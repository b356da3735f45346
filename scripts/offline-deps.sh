#!/usr/bin/env bash
# Run on the development machine (Debian 12, network to the Debian archive). Prepares what an
# offline GPU host needs beyond its own PyTorch wheel, in DIR:
#   DIR/prefix/   the Debian -dev packages trainbench builds with, unpacked with dpkg -x
#                 (a prefix CMake can search: scripts/gpu-check.sh --deps DIR)
#   DIR/prebuilt/ the binaries built here plus the few shared libraries they need
#                 (scripts/gpu-check.sh --prebuilt DIR), to skip the build on the host
#   usage: scripts/offline-deps.sh DIR [--no-prebuilt]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 DIR [--no-prebuilt]" >&2; exit 2; }
dir=$(realpath -m "$1")
prebuilt=1
[ "${2:-}" = "--no-prebuilt" ] && prebuilt=0
command -v apt-get >/dev/null || { echo "offline-deps.sh: needs apt-get (Debian 12)" >&2; exit 2; }

packages=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
          nlohmann-json3-dev catch2 libcli11-dev zlib1g-dev libgloo-dev libjpeg62-turbo-dev libjpeg62-turbo)
rm -rf "$dir/debs" "$dir/prefix"
mkdir -p "$dir/debs" "$dir/prefix"
(cd "$dir/debs" && apt-get download "${packages[@]}" > /dev/null) ||
  { echo "offline-deps.sh: apt-get download failed (run 'apt-get update' once?)" >&2; exit 1; }
for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir/prefix"; done
rm -rf "$dir/prefix/usr/share/doc" "$dir/prefix/usr/share/man"

if [ "$prebuilt" = 1 ]; then
  [ -x build/trainbench ] && [ -x build/tests/trainbench_tests ] ||
    { echo "offline-deps.sh: build first (scripts/setup.sh), or pass --no-prebuilt" >&2; exit 1; }
  rm -rf "$dir/prebuilt"
  mkdir -p "$dir/prebuilt/lib"
  cp build/trainbench build/tests/trainbench_tests "$dir/prebuilt/"
  # The non-torch libraries they load; LibTorch and CUDA come from the host's own wheel. Debian's
  # libjpeg.so.62 (libjpeg-turbo) is not what other distributions ship (Ubuntu has libjpeg.so.8).
  if ldd build/trainbench build/tests/trainbench_tests | grep -q "not found"; then
    echo "offline-deps.sh: the binaries lack shared libraries here:" >&2
    ldd build/trainbench build/tests/trainbench_tests | grep "not found" >&2
    exit 1
  fi
  for lib in $(ldd build/trainbench build/tests/trainbench_tests | awk '/=>/ {print $3}' |
               grep -E 'libyaml-cpp|libspdlog|libfmt|libjpeg' | sort -u); do
    cp -L "$lib" "$dir/prebuilt/lib/"
  done
fi
# nvJPEG for data.decode: device. torch's wheel does not depend on nvidia-nvjpeg, so a GPU host
# with only PyTorch lacks it; the copy scripts/setup.sh put beside torch's CUDA libraries travels,
# in the prefix (the build route's LD_LIBRARY_PATH) and beside the prebuilt binaries.
source scripts/env.sh
nvjpeg=$("$TRAINBENCH_PYTHON" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu13", "lib", "libnvjpeg.so.13"))' 2>/dev/null || true)
if [ -n "$nvjpeg" ] && [ -f "$nvjpeg" ]; then
  cp -L "$nvjpeg" "$dir/prefix/usr/lib/x86_64-linux-gnu/"
  [ "$prebuilt" = 1 ] && cp -L "$nvjpeg" "$dir/prebuilt/lib/"
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
(cd "$dir" && find prefix/usr/lib -name '*.so*' -o -name '*Config.cmake' -o -name '*config.cmake' | sort)
[ "$prebuilt" = 1 ] && (cd "$dir" && ls -la prebuilt prebuilt/lib)
echo "packages: ${packages[*]}"
