#!/usr/bin/env bash
# One-time (and idempotent) set-up on Debian 12 / Ubuntu: system packages, the pinned PyTorch
# wheel (its LibTorch is what trainbench links), then a Release build in build/.
# Installs only what is missing; a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

die() { echo "setup.sh: $*" >&2; exit 1; }
step() { echo "== $*"; }

[ -r /etc/os-release ] || die "cannot read /etc/os-release; this script supports Debian 12 and Ubuntu"
. /etc/os-release
case " ${ID:-} ${ID_LIKE:-} " in
  *" debian "*|*" ubuntu "*) ;;
  *) die "this is ${PRETTY_NAME:-an unknown system}; the script supports Debian 12 and Ubuntu (apt). On other systems install the packages listed in README.md by hand." ;;
esac

packages=(g++ cmake ninja-build git python3 python3-venv pkg-config
          libyaml-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev catch2 libcli11-dev zlib1g-dev
          libjpeg62-turbo-dev  # libjpeg-turbo: partial and DCT-scaled JPEG decoding
          libsqlite3-dev libpq-dev  # trainbench history: SQLite, and libpq (PostgreSQL's C client)
          dataset-fashion-mnist
          libgloo-dev)  # headers only: ProcessGroupGloo.hpp includes Gloo's, the wheel lacks them
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" -eq 0 ] || die "missing packages (${missing[*]}) and not root: run as root or with sudo"
  step "apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  step "system packages: all present"
fi

# The CUDA wheel's CMake config needs a CUDA toolkit (headers, nvcc) even to build the CPU path.
CUDA_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}"
[ -x "$CUDA_ROOT/bin/nvcc" ] || command -v nvcc >/dev/null ||
  die "no CUDA toolkit at $CUDA_ROOT (nvcc not found). Install the CUDA 13 toolkit, or set CUDAToolkit_ROOT."

if [ -x "$TRAINBENCH_PYTHON" ] && "$TRAINBENCH_PYTHON" - <<PY 2>/dev/null
import torch, torchvision, yaml
assert torch.__version__.split("+")[0] == "$TORCH_VERSION_PIN"
assert torchvision.__version__.split("+")[0] == "$TORCHVISION_VERSION_PIN"
PY
then
  step "python environment: $TRAINBENCH_VENV (torch $TORCH_VERSION_PIN present)"
else
  step "python environment: installing torch==$TORCH_VERSION_PIN into $TRAINBENCH_VENV (about 5 GB with its CUDA libraries)"
  python3 -m venv "$TRAINBENCH_VENV"
  "$TRAINBENCH_PYTHON" -m pip install --quiet --upgrade pip
  "$TRAINBENCH_PYTHON" -m pip install --quiet "torch==$TORCH_VERSION_PIN" "torchvision==$TORCHVISION_VERSION_PIN" pyyaml
fi

# data.decode: device compiles against this wheel's nvjpeg.h and loads its libnvjpeg.so.13 at run
# time; the version is the one torch's cuda-toolkit 13.0.2 pin selects (cuda-toolkit[nvjpeg]).
if [ -f "$("$TRAINBENCH_PYTHON" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu13", "include", "nvjpeg.h"))')" ]; then
  step "nvjpeg: present"
else
  step "nvjpeg: installing nvidia-nvjpeg==$NVJPEG_VERSION_PIN into $TRAINBENCH_VENV"
  "$TRAINBENCH_PYTHON" -m pip install --quiet "nvidia-nvjpeg==$NVJPEG_VERSION_PIN"
fi

# backend.compile's fused batch norm compiles against the cuDNN frontend's header-only C++ API
# (<site-packages>/include/cudnn_frontend.h). --no-deps: only the headers are used; the cuDNN it
# calls is the one torch already runs with.
if "$TRAINBENCH_PYTHON" -m pip show nvidia-cudnn-frontend 2>/dev/null | grep -qx "Version: $CUDNN_FRONTEND_VERSION_PIN"; then
  step "cudnn-frontend: present"
else
  step "cudnn-frontend: installing nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION_PIN into $TRAINBENCH_VENV"
  "$TRAINBENCH_PYTHON" -m pip install --quiet --no-deps "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION_PIN"
fi

# scripts/otava-crosscheck.py (a ctest test): apache-otava's change points beside trainbench's.
# --no-deps: its other dependencies (BigQuery, Slack, Graphite clients) serve its own command
# line; the analysis module it is checked against imports only NumPy and SciPy.
if "$TRAINBENCH_OTAVA_VENV/bin/python" -c 'import otava.analysis' 2>/dev/null; then
  step "apache-otava: present ($TRAINBENCH_OTAVA_VENV)"
else
  step "apache-otava: installing apache-otava==$OTAVA_VERSION_PIN into $TRAINBENCH_OTAVA_VENV"
  python3 -m venv "$TRAINBENCH_OTAVA_VENV"
  "$TRAINBENCH_OTAVA_VENV/bin/python" -m pip install --quiet --no-deps "apache-otava==$OTAVA_VERSION_PIN" \
    "numpy==2.2.*" "scipy==1.16.*"
fi

prefix=$("$TRAINBENCH_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
if [ ! -f build/build.ninja ]; then
  step "configure build/ (Release)"
  mkdir -p build
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
        -DCUDAToolkit_ROOT="$CUDA_ROOT" -DTRAINBENCH_OTAVA_PYTHON="$TRAINBENCH_OTAVA_VENV/bin/python" > build/configure.log 2>&1 || { cat build/configure.log; die "cmake failed"; }
fi
step "build with $(nproc) jobs"
cmake --build build -j "$(nproc)"
step "done: ./build/trainbench --version"
./build/trainbench --version
