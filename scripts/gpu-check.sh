#!/usr/bin/env bash
# Run on an offline GPU host, from the repository root: build (or take prebuilt binaries), run
# every [gpu] test, the ladders and the PyTorch reference for the same profiles, compare them,
# and collect every report, the tables, the charts and a log in --out.
#   usage: scripts/gpu-check.sh [--deps DIR | --prebuilt DIR] [--out DIR] [--quick] [--rehearse]
#                               [--budget S] [--only LIST] [--pack FILE]
#     --deps DIR      prefix made by scripts/offline-deps.sh (DIR/prefix): build here with Ninja
#     --prebuilt DIR  binaries made by scripts/offline-deps.sh (DIR/prebuilt): skip the build
#     --quick         fewer batches, repeats and rounds, fewer reference rungs
#     --rehearse      on a machine without a GPU: every phase on the CPU with tiny settings (the
#                     [gpu] tests are only listed), to check the kit before spending GPU time
#     --budget S      finish within S seconds: each phase runs with the time left (then SIGINT, so
#                     a ladder keeps the rungs it finished), the phases after it are skipped and
#                     listed in skipped.txt; the results page and the pack always run
#     --only LIST     the phases to run, comma-separated, from: tests ladder reference bottleneck
#                     plus dist imagenet resnet50 sanitizer (default: all, in that order: their
#                     priority)
#     --pack FILE     end by packing --out into one .tar.gz (for a host that returns few files)
set -uo pipefail
cd "$(dirname "$0")/.."
deps="" prebuilt="" out="gpu-check-out" quick=0 rehearse=0 budget=0 only="" pack=""
all_phases="tests ladder reference bottleneck plus dist imagenet resnet50 sanitizer"
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps=$(realpath "$2"); shift 2 ;;
    --prebuilt) prebuilt=$(realpath "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --rehearse) rehearse=1; quick=1; shift ;;
    --budget) budget=$2; shift 2 ;;
    --only) only=${2//,/ }; only_given=1; shift 2 ;;
    --pack) pack=$(realpath -m "$2"); shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu-check.sh: --budget takes whole seconds, not '$budget'" >&2; exit 2; }
[ -n "${only_given:-}" ] && [ -z "${only// /}" ] &&
  { echo "gpu-check.sh: --only names no phase (phases: $all_phases)" >&2; exit 2; }
for p in $only; do
  [[ " $all_phases " == *" $p "* ]] || { echo "gpu-check.sh: --only: unknown phase '$p' (phases: $all_phases)" >&2; exit 2; }
done
mkdir -p "$out"
out=$(realpath "$out")
log=$out/gpu-check.log
# The log through tee; the pack waits for tee to drain it (else the packed log lags the screen).
exec 3>&1 4>&2
exec > >(tee "$log") 2>&1
tee_pid=$!
packed=0
pack_out() {
  [ -n "$pack" ] && [ $packed = 0 ] || return 0
  packed=1
  echo "packing $out into $pack"
  exec >&3 2>&4
  wait "$tee_pid" 2>/dev/null
  mkdir -p "$(dirname "$pack")"
  tar -C "$(dirname "$out")" -czf "$pack" "$(basename "$out")" && echo "packed ($(du -h "$pack" | cut -f1))"
}
# Also on an early exit (die, a failed build): whatever was gathered comes back.
trap pack_out EXIT
die() { echo "gpu-check.sh: $*"; exit 1; }
t0=$(date +%s)
phase_start=$t0
phase() {
  local now; now=$(date +%s)
  echo "-- ${current_phase:-start}: $((now - phase_start)) s (total $((now - t0)) s)"
  current_phase=$1; phase_start=$now
  echo "== $1"
}
# With --budget, 30 s stay for the results page and the pack (a stopped phase's SIGKILL comes 10 s
# after its SIGINT, within them).
left() { [ "$budget" -gt 0 ] && echo $((t0 + budget - 30 - $(date +%s))) || echo 999999; }
skipped=()
: > "$out/cut.txt"  # phases the budget stopped; a file, since within runs in pipelines' subshells
# SIGTERM (or SIGINT, where the shell that started the script did not ignore it): no further phase
# starts; the page and the pack still run. The running phase's timeout is in a process group of
# its own: signal that group to stop the phase too.
stop=0
trap 'stop=1; echo "gpu-check.sh: signal: no further phase starts"' INT TERM
# A selected phase with time left starts; any other is skipped (and listed when the budget did it).
start() {
  [ -z "$only" ] || [[ " $only " == *" $1 "* ]] || return 1
  if [ $stop = 1 ]; then
    skipped+=("$1"); echo "== $1: skipped, stopped by a signal"; return 1
  fi
  if [ "$(left)" -le 20 ]; then
    skipped+=("$1"); echo "== $1: skipped, the budget is spent"; return 1
  fi
  phase "$1"
}
# A command with the phase's time, or less (CAP s): SIGINT at the limit (trainbench then writes
# what it has), SIGKILL GRACE s later, inside the 30 s kept. timeout signals its whole process
# group, so a ladder's rungs stop with it; a phase it stopped is listed in cut.txt.
limited() {
  local cap=$1 grace=$2 l rc; shift 2
  l=$(( $(left) - grace + 10 ))
  [ "$cap" -lt "$l" ] && l=$cap
  if [ "$l" -le 5 ]; then
    echo "gpu-check.sh: no time left for: $*"; echo "$current_phase" >> "$out/cut.txt"; return 124
  fi
  timeout -s INT -k "$grace" "$l" "$@"
  rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "gpu-check.sh: stopped after $l s: $*"; echo "$current_phase" >> "$out/cut.txt"
  fi
  return $rc
}
within() { limited 999999 10 "$@"; }
within_cap() { local cap=$1; shift; limited "$cap" 10 "$@"; }

phase "preflight"
# The project's own environment (scripts/setup.sh) when there is one, else python3 on PATH.
source scripts/env.sh
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$TRAINBENCH_PYTHON" ]; then PY=$TRAINBENCH_PYTHON
else PY=python3; fi
echo "python: $PY"
# The tests' Python (torchrun, trace checks): this one, not the build machine's path compiled in.
export TRAINBENCH_PYTHON=$PY
missing=$($PY -c 'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))' \
  torch torchvision yaml) || die "cannot run $PY (set PYTHON to a Python with torch $TORCH_VERSION_PIN)"
[ -z "$missing" ] || die "$PY lacks the Python module(s): $missing (the kit needs torch, torchvision and PyYAML; set PYTHON, or run scripts/setup.sh)"
# One interpreter start (importing torch takes seconds): LibTorch's CMake prefix, its libraries,
# the CUDA runtime the wheel brings (our binaries link libcudart.so.13 directly), CUDA or not.
read -r torch_prefix torch_lib cuda_lib has_cuda < <($PY -c '
import os, torch
here = os.path.dirname(torch.__file__)
print(torch.utils.cmake_prefix_path, os.path.join(here, "lib"),
      os.path.realpath(os.path.join(here, "..", "nvidia", "cu13", "lib")), int(torch.cuda.is_available()))')
[ -n "${has_cuda:-}" ] || die "$PY cannot import torch"
if [ $rehearse = 1 ]; then
  echo "rehearsal: no GPU checks; every run is forced onto the CPU with tiny settings"
else
  command -v nvidia-smi >/dev/null || die "no nvidia-smi: this script needs an NVIDIA GPU host"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || die "nvidia-smi failed"
  [ "$has_cuda" = 1 ] || die "$PY has no torch with CUDA"
fi
if [ -n "$prebuilt" ]; then
  [ -x "$prebuilt/prebuilt/trainbench" ] || die "no prebuilt binaries in $prebuilt/prebuilt (scripts/offline-deps.sh)"
  [ -d "$prebuilt/prebuilt/libs" ] || die "no carried libraries in $prebuilt/prebuilt/libs (scripts/offline-deps.sh from this commit)"
elif [ -n "$deps" ]; then
  [ -d "$deps/prefix/usr/include/yaml-cpp" ] || die "no yaml-cpp in $deps/prefix (scripts/offline-deps.sh DIR)"
  [ -f "$deps/prefix/usr/include/postgresql/libpq-fe.h" ] || die "no libpq headers in $deps/prefix (scripts/offline-deps.sh from this commit)"
else
  die "give --deps DIR or --prebuilt DIR (made by scripts/offline-deps.sh on a Debian machine)"
fi

# Only the libraries this host lacks go on the library path (scripts/lib-missing.sh), never a
# carried copy of one it has: the wheel's LibTorch and CUDA first, then the links made here.
libdir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-libs.XXXXXX")
export LD_LIBRARY_PATH="$libdir:$torch_lib:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -n "$prebuilt" ]; then
  phase "prebuilt binaries"
  TB=$prebuilt/prebuilt/trainbench
  TESTS=$prebuilt/prebuilt/trainbench_tests
  modules=$prebuilt/prebuilt/modules
  echo "prebuilt binaries (built on the development machine)" > "$out/route.txt"
  scripts/lib-missing.sh "$prebuilt/prebuilt/libs" "$libdir" "$TB" "$TESTS" $(ls "$modules"/*.so 2>/dev/null) |
    tee "$out/libs-missing.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || die "the binaries cannot load on this host (libs-missing.txt)"
  # The test modules travel beside the binaries, not at the build tree's paths compiled in.
  [ -f "$modules/libtrainbench_nvtx_recorder.so" ] && export TRAINBENCH_NVTX_RECORDER=$modules/libtrainbench_nvtx_recorder.so
else
  phase "build"
  # The prefix's libraries are for the linker (libpq's libldap through -rpath-link), and at run
  # time only where this host lacks them (lib-missing.sh below), never on LD_LIBRARY_PATH whole.
  rpath_link="-Wl,-rpath-link,$deps/prefix/usr/lib/x86_64-linux-gnu:$deps/prefix/lib/x86_64-linux-gnu"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/prefix/usr;$deps/prefix/usr/lib/x86_64-linux-gnu/cmake;$deps/prefix/usr/share/cmake" \
    -DCMAKE_INCLUDE_PATH="$deps/prefix/usr/include" -DCMAKE_LIBRARY_PATH="$deps/prefix/usr/lib/x86_64-linux-gnu" \
    -DCMAKE_EXE_LINKER_FLAGS="$rpath_link" -DCMAKE_SHARED_LINKER_FLAGS="$rpath_link" -DCMAKE_MODULE_LINKER_FLAGS="$rpath_link" \
    > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; die "cmake failed"; }
  cmake --build build-gpu -j "$(nproc)" || die "build failed"
  TB=$PWD/build-gpu/trainbench
  TESTS=$PWD/build-gpu/tests/trainbench_tests
  echo "built on this host against the prefix" > "$out/route.txt"
  scripts/lib-missing.sh "$deps/prefix/usr/lib/x86_64-linux-gnu:$deps/prefix/lib/x86_64-linux-gnu" "$libdir" "$TB" "$TESTS" $(ls build-gpu/tests/*.so 2>/dev/null) |
    tee "$out/libs-missing.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || die "the binaries cannot load on this host (libs-missing.txt)"
fi
export TRAINBENCH_EXE=$TB TRAINBENCH_SOURCE_DIR=$PWD
$TB --version || die "trainbench does not start"
# nvJPEG (data.decode: device): the copy offline-deps.sh brought; else torchvision's own (a hashed
# file name, built for the same CUDA 13); else decoding falls back to the host, and says so.
if [ -z "${TRAINBENCH_NVJPEG:-}" ]; then
  nv=$(ls "${prebuilt:-/nonexistent}"/prebuilt/nvjpeg/libnvjpeg.so.13 "${deps:-/nonexistent}"/prefix/usr/lib/*/libnvjpeg.so.13 2>/dev/null | head -1)
  [ -n "$nv" ] || nv=$($PY -c 'import glob, os, torchvision as t; print((glob.glob(os.path.join(os.path.dirname(t.__file__), "..", "torchvision.libs", "libnvjpeg*.so*")) + [""])[0])' 2>/dev/null)
  [ -n "$nv" ] && export TRAINBENCH_NVJPEG=$nv
fi
echo "nvjpeg: ${TRAINBENCH_NVJPEG:-none found (data.decode: device falls back to the host)}"

tests_rc=0
if start tests; then
  if [ $rehearse = 1 ]; then
    # They need a GPU; listing proves the binary loads (Catch2 exits with the number listed).
    $TESTS "[gpu]" --list-tests 2>&1 | tee "$out/gpu-tests.txt"
    [ "${PIPESTATUS[0]}" -gt 0 ] && tests_rc=0 || tests_rc=1
  else
    # Catch2 has no per-test timeout: a hung test must not take the whole budget.
    within_cap 300 $TESTS "[gpu]" -w NoTests --reporter compact 2>&1 | tee "$out/gpu-tests.txt"
    tests_rc=${PIPESTATUS[0]}
  fi
fi

sets=()
[ $quick = 1 ] && sets=(--set measure.repeats=3)
[ $rehearse = 1 ] && sets=(--set device=cpu --set data.image_size=32 --set train.batch_size=8 --set data.workers=1
  --set measure.warmup_batches=1 --set measure.measured_batches=2 --set measure.repeats=2)
backend=$([ $rehearse = 1 ] && echo gloo || echo nccl)
# Every rung and round in a fresh process, the rungs interleaved: --quick takes two rounds.
rounds=$([ $quick = 1 ] && echo 2 || echo 3)

cifar() {
  local data=data/cifar-10-batches-bin samples
  samples=$([ $quick = 1 ] && echo 10000 || echo 50000)
  [ -f $data/data_batch_1.bin ] || within $TB make-dataset cifar10 --out $data --samples $samples
}
# configs/imagenet and configs/resnet50/08 read data/imagenet: dead-leaves JPEGs of ImageNet's sizes.
imagefolder() {
  local per_class
  per_class=$([ $rehearse = 1 ] && echo 10 || echo 100)
  [ -f data/imagenet/GENERATED ] || within $TB make-dataset imagefolder --out data/imagenet --classes 10 --per-class $per_class
}

if start ladder; then
  cifar
  within $TB ladder configs/ladder --out "$out/ladder" --rounds $rounds --quiet "${sets[@]}"
fi

if start reference; then
  # The PyTorch reference of the same profiles (its 07 is torch.compile + overlap: goal 1's baseline).
  cifar
  mkdir -p "$out/pytorch"
  # 07 first: the first goal needs it whatever the budget leaves for the others.
  rungs=(configs/ladder/07-stream-overlap.yaml $(ls configs/ladder/*.yaml | grep -v 07-stream-overlap))
  [ $quick = 1 ] && rungs=(configs/ladder/07-stream-overlap.yaml configs/ladder/00-baseline.yaml configs/ladder/04-amp.yaml)
  for f in "${rungs[@]}"; do
    n=$(basename "$f" .yaml)
    within $PY scripts/reference/pytorch_run.py --trainbench "$TB" --config "$f" "${sets[@]}" --out "$out/pytorch/$n.json" ||
      echo "reference $n failed"
  done
fi

if start bottleneck; then
  # Each rung against its compute ceiling (same step, one reused device batch), interleaved: goal 2.
  cifar
  for n in 07-stream-overlap 01-workers; do
    within $TB bottleneck -c configs/ladder/$n.yaml --rounds 2 --out "$out/bottleneck/$n" --quiet "${sets[@]}" ||
      echo "bottleneck $n failed"
  done
fi

if start plus; then
  cifar
  within $TB ladder configs/ladder-plus --out "$out/ladder-plus" --rounds $rounds --quiet "${sets[@]}"
fi

if start dist; then
  # One GPU: NCCL with one rank (NCCL needs a GPU per rank), against the ladder's rung as baseline.
  cifar
  # The ladder's 04 as baseline, only if it finished (a refused baseline would stop the run).
  base=$(ls "$out"/ladder/*04-amp*.json 2>/dev/null | head -1)
  [ -n "$base" ] && ! grep -q '"status": "ok"' "$base" && base=""
  # torchrun starts its worker in a session of its own: timeout's group signal misses it, and
  # torchrun forwards SIGINT and waits up to 30 s before killing it, hence the longer grace.
  limited 999999 40 $PY -m torch.distributed.run --nproc-per-node 1 --master-port 29561 --no-python "$TB" run \
    --config configs/ladder/04-amp.yaml --set dist.backend=$backend "${sets[@]}" --out "$out/dist-$backend-1.json" \
    ${base:+--baseline "$base"} || echo "data-parallel $backend run failed"
fi

if start imagenet; then
  # The ladder on JPEGs: host decoding in the loader's threads up to nvJPEG on the GPU.
  imagefolder
  within $TB ladder configs/imagenet --out "$out/imagenet" --rounds $rounds --quiet "${sets[@]}"
fi

if start resnet50; then
  # ResNet-50 up to NVIDIA's recipe (and on JPEGs in 08): reports carry the share of the tensor-core peak.
  imagefolder
  r50=("${sets[@]}")
  [ $quick = 1 ] && [ $rehearse = 0 ] && r50+=(--set measure.measured_batches=10)
  within $TB ladder configs/resnet50 --out "$out/resnet50" --rounds $rounds --quiet "${r50[@]}"
fi

if start sanitizer; then
  # The copy stream's [gpu] test under compute-sanitizer: memcheck (out-of-bounds and misaligned
  # accesses, leaks of device memory) and racecheck (shared-memory hazards in the kernels it runs).
  # PyTorch's caching allocator hides its blocks' bounds from memcheck: turned off for it.
  # A comma in a Catch2 test spec separates two specs, hence the backslash.
  cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  if [ $rehearse = 1 ] || [ ! -x "$cs" ]; then
    echo "no compute-sanitizer (PATH, \$CUDA_HOME/bin), or a rehearsal: skipped" | tee "$out/sanitizer-memcheck.txt"
  else
    for tool in memcheck racecheck; do
      extra=(); [ $tool = memcheck ] && extra=(--leak-check full)
      PYTORCH_NO_CUDA_MEMORY_CACHING=$([ $tool = memcheck ] && echo 1 || echo 0) \
        within "$cs" --tool $tool "${extra[@]}" --error-exitcode 9 \
        $TESTS "copy stream delivers every batch intact\\, with slow and fast steps" -w NoTests 2>&1 |
        tee "$out/sanitizer-$tool.txt"
      echo "compute-sanitizer $tool: exit ${PIPESTATUS[0]}" | tee -a "$out/sanitizer-$tool.txt"
    done
  fi
fi

phase "results"
printf '%s\n' "${skipped[@]}" > "$out/skipped.txt"
sort -u -o "$out/cut.txt" "$out/cut.txt"
[ -s "$out/cut.txt" ] && echo "stopped by the budget: $(tr '\n' ' ' < "$out/cut.txt")"
[ ${#skipped[@]} -gt 0 ] && echo "skipped (budget): ${skipped[*]}"
[ -d "$out/pytorch" ] && [ -d "$out/ladder" ] &&
  $TB compare "$out/pytorch" "$out/ladder" --format markdown | tee "$out/compare.md"
$PY scripts/results-page.py --out-dir "$out" > "$out/results.md" || echo "results page failed"

phase "end"
echo "gpu tests exit code: $tests_rc; everything is in $out"
pack_out
exit $tests_rc
