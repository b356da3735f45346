#!/usr/bin/env bash
# Run on an offline GPU host, from the repository root: build (or take prebuilt binaries), run
# every [gpu] test, the ladders and the PyTorch reference for the same profiles, compare them,
# and collect every report, the tables, the charts and a log in --out.
#   usage: scripts/gpu-check.sh [--deps DIR] [--prebuilt DIR] [--out DIR] [--quick] [--rehearse]
#     --deps DIR      prefix made by scripts/offline-deps.sh (DIR/prefix): build here with Ninja
#     --prebuilt DIR  binaries made by scripts/offline-deps.sh (DIR/prebuilt): skip the build
#     --quick         fewer batches and repeats, fewer reference rungs (under 4 minutes)
#     --rehearse      on a machine without a GPU: every phase on the CPU with tiny settings (the
#                     [gpu] tests are only listed), to check the kit before spending GPU time
set -uo pipefail
cd "$(dirname "$0")/.."
deps="" prebuilt="" out="gpu-check-out" quick=0 rehearse=0
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps=$(realpath "$2"); shift 2 ;;
    --prebuilt) prebuilt=$(realpath "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --rehearse) rehearse=1; quick=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
out=$(realpath "$out")
log=$out/gpu-check.log
exec > >(tee "$log") 2>&1
die() { echo "gpu-check.sh: $*"; exit 1; }
t0=$(date +%s)
phase_start=$t0
phase() {
  local now; now=$(date +%s)
  echo "-- ${current_phase:-start}: $((now - phase_start)) s (total $((now - t0)) s)"
  current_phase=$1; phase_start=$now
  echo "== $1"
}

phase "preflight"
# The project's own environment (scripts/setup.sh) when there is one, else python3 on PATH.
source scripts/env.sh
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$TRAINBENCH_PYTHON" ]; then PY=$TRAINBENCH_PYTHON
else PY=python3; fi
echo "python: $PY"
missing=$($PY -c 'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' \
  torch torchvision yaml) || die "cannot run $PY (set PYTHON to a Python with torch $TORCH_VERSION_PIN)"
[ -z "$missing" ] || die "$PY lacks the Python module(s): $missing (the kit needs torch, torchvision and PyYAML; set PYTHON, or run scripts/setup.sh)"
if [ $rehearse = 1 ]; then
  echo "rehearsal: no GPU checks; every run is forced onto the CPU with tiny settings"
else
  command -v nvidia-smi >/dev/null || die "no nvidia-smi: this script needs an NVIDIA GPU host"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || die "nvidia-smi failed"
  $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || die "$PY has no torch with CUDA"
fi
torch_prefix=$($PY -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_lib=$($PY -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
# The CUDA runtime the wheel brings (our binaries link libcudart.so.13 directly).
cuda_lib=$($PY -c 'import torch, os; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu13", "lib")))')
if [ -n "$prebuilt" ]; then
  [ -x "$prebuilt/prebuilt/trainbench" ] || die "no prebuilt binaries in $prebuilt/prebuilt (scripts/offline-deps.sh)"
elif [ -n "$deps" ]; then
  [ -d "$deps/prefix/usr/include/yaml-cpp" ] || die "no yaml-cpp in $deps/prefix (scripts/offline-deps.sh DIR)"
else
  die "give --deps DIR or --prebuilt DIR (made by scripts/offline-deps.sh on a Debian machine)"
fi

if [ -n "$prebuilt" ]; then
  phase "prebuilt binaries"
  export LD_LIBRARY_PATH="$prebuilt/prebuilt/lib:$torch_lib:$cuda_lib:${LD_LIBRARY_PATH:-}"
  TB=$prebuilt/prebuilt/trainbench
  TESTS=$prebuilt/prebuilt/trainbench_tests
else
  phase "build"
  export LD_LIBRARY_PATH="$deps/prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/prefix/usr;$deps/prefix/usr/lib/x86_64-linux-gnu/cmake;$deps/prefix/usr/share/cmake" \
    -DCMAKE_INCLUDE_PATH="$deps/prefix/usr/include" -DCMAKE_LIBRARY_PATH="$deps/prefix/usr/lib/x86_64-linux-gnu" \
    > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; die "cmake failed"; }
  cmake --build build-gpu -j "$(nproc)" || die "build failed"
  TB=$PWD/build-gpu/trainbench
  TESTS=$PWD/build-gpu/tests/trainbench_tests
fi
export TRAINBENCH_EXE=$TB TRAINBENCH_SOURCE_DIR=$PWD
$TB --version || die "trainbench does not start"

phase "gpu tests"
if [ $rehearse = 1 ]; then
  # They need a GPU; listing proves the binary loads (Catch2 exits with the number listed).
  $TESTS "[gpu]" --list-tests 2>&1 | tee "$out/gpu-tests.txt"
  [ "${PIPESTATUS[0]}" -gt 0 ] && tests_rc=0 || tests_rc=1
else
  $TESTS "[gpu]" --reporter compact 2>&1 | tee "$out/gpu-tests.txt"
  tests_rc=${PIPESTATUS[0]}
fi

phase "dataset"
data=data/cifar-10-batches-bin
samples=$([ $quick = 1 ] && echo 10000 || echo 50000)
[ -f $data/data_batch_1.bin ] || $TB make-dataset cifar10 --out $data --samples $samples

phase "ladder"
sets=()
[ $quick = 1 ] && sets=(--set measure.repeats=3)
[ $rehearse = 1 ] && sets=(--set device=cpu --set data.image_size=32 --set train.batch_size=8 --set data.workers=1
  --set measure.warmup_batches=1 --set measure.measured_batches=2 --set measure.repeats=2)
backend=$([ $rehearse = 1 ] && echo gloo || echo nccl)
# Every rung and round in a fresh process, the rungs interleaved: --quick takes two rounds.
rounds=$([ $quick = 1 ] && echo 2 || echo 3)
$TB ladder configs/ladder --out "$out/ladder" --rounds $rounds --quiet "${sets[@]}"
$TB ladder configs/ladder-plus --out "$out/ladder-plus" --rounds $rounds --quiet "${sets[@]}"
# ResNet-50 up to NVIDIA's recipe: its reports carry the share of the GPU's tensor-core peak.
$TB ladder configs/resnet50 --out "$out/resnet50" --rounds $rounds --quiet "${sets[@]}"

phase "data-parallel"
# One GPU: NCCL with one rank (NCCL needs a GPU per rank), against the ladder's rung as baseline.
base=$(ls "$out"/ladder/*04-amp*.json 2>/dev/null | head -1)
$PY -m torch.distributed.run --nproc-per-node 1 --master-port 29561 --no-python "$TB" run \
  --config configs/ladder/04-amp.yaml --set dist.backend=$backend "${sets[@]}" --out "$out/dist-$backend-1.json" \
  ${base:+--baseline "$base"} || echo "data-parallel $backend run failed"

phase "bottleneck"
# Each rung against its compute ceiling (same step, one reused device batch), interleaved.
for n in 01-workers 07-stream-overlap; do
  $TB bottleneck -c configs/ladder/$n.yaml --rounds 2 --out "$out/bottleneck/$n" --quiet "${sets[@]}" ||
    echo "bottleneck $n failed"
done

phase "pytorch reference"
mkdir -p "$out/pytorch"
rungs=(configs/ladder/*.yaml)
[ $quick = 1 ] && rungs=(configs/ladder/00-baseline.yaml configs/ladder/04-amp.yaml configs/ladder/07-stream-overlap.yaml)
for f in "${rungs[@]}"; do
  n=$(basename "$f" .yaml)
  $PY scripts/reference/pytorch_run.py --trainbench "$TB" --config "$f" "${sets[@]}" --out "$out/pytorch/$n.json" ||
    echo "reference $n failed"
done

phase "compare"
$TB compare "$out/pytorch" "$out/ladder" --format markdown | tee "$out/compare.md"
$PY scripts/results-page.py --ladder "$out/ladder" --plus "$out/ladder-plus" --pytorch "$out/pytorch" \
  --tests "$out/gpu-tests.txt" --dist "$out/dist-$backend-1.json" --bottleneck "$out/bottleneck" \
  > "$out/results.md" || echo "results page failed"

phase "end"
echo "gpu tests exit code: $tests_rc; everything is in $out"
exit $tests_rc
