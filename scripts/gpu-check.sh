#!/usr/bin/env bash
# Run on an offline GPU host, from the repository root: build (or take prebuilt binaries), run
# every [gpu] test case in a process of its own, the ladders and the PyTorch reference for the same
# profiles, decoding on the host against the GPU, ResNet-50, bottleneck, NCCL and compute-sanitizer,
# and collect every report, the tables, the charts, the per-test list and a log in --out.
#   usage: scripts/gpu-check.sh [--deps DIR | --prebuilt DIR] [--out DIR] [--quick] [--rehearse]
#                               [--budget S] [--only LIST] [--phase-budget P=S,...] [--tests-from FILE]
#                               [--continue DIR] [--pack FILE] [--plan]
#     --deps DIR      prefix made by scripts/offline-deps.sh (DIR/prefix): build here with Ninja
#     --prebuilt DIR  binaries made by scripts/offline-deps.sh (DIR/prebuilt): skip the build
#     --quick         the sizes that fit one call (fewer rounds, rungs and reference profiles)
#     --rehearse      on a machine without a GPU: every phase on the CPU with tiny settings, each
#                     [gpu] test case started in its own process (each must stop at "no CUDA
#                     device"), to check the kit before spending GPU time; the budget is not enforced
#     --budget S      finish within S seconds: each phase runs under its own cap (the plan below,
#                     plus what earlier phases left unused), a phase that reaches it gets SIGINT (a
#                     ladder keeps the rungs it finished), phases with no time left are skipped and
#                     listed in skipped.txt; the results page and the pack always run
#     --only LIST     the phases to run, comma-separated, from: data tests ladder reference plus decode
#                     resnet50 bottleneck dist sanitizer imagenet fusion probe (default: all, in that
#                     order: their priority; data runs whenever a selected phase needs it; fusion
#                     (fusion-bench) and probe (the bf16 probe) have no time of their own: they run
#                     on what the others left, and in a second call)
#     --phase-budget  P=S,...: another cap for some phases (seconds), e.g. tests=200
#     --tests-from F  run only the [gpu] test cases named in F, one a line (a first call's
#                     gpu-tests-left.txt: the cases it did not finish)
#     --continue DIR  a second call after a first that wrote DIR (or its --pack archive): the
#                     phases it skipped or cut (--only), the test cases it left (--tests-from),
#                     then the bf16 probe
#     --pack FILE     end by packing --out into one .tar.gz (for a host that returns few files)
#     --plan          print the plan (phases and their caps) and exit, 1 if it exceeds --budget
set -uo pipefail
cd "$(dirname "$0")/.."
deps="" prebuilt="" out="gpu-check-out" quick=0 rehearse=0 budget=0 only="" pack="" tests_from="" plan_only=0
phase_budget_arg=""
all_phases="data tests ladder reference plus decode resnet50 bottleneck dist sanitizer imagenet fusion probe"
while [ $# -gt 0 ]; do
  case "$1" in
    --deps) deps=$(realpath "$2"); shift 2 ;;
    --prebuilt) prebuilt=$(realpath "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --rehearse) rehearse=1; quick=1; shift ;;
    --budget) budget=$2; shift 2 ;;
    --only) only=${2//,/ }; only_given=1; shift 2 ;;
    --phase-budget) phase_budget_arg=$2; shift 2 ;;
    --tests-from) tests_from=$(realpath "$2"); shift 2 ;;
    --continue) continue_from=$(realpath -m "$2"); shift 2 ;;
    --pack) pack=$(realpath -m "$2"); shift 2 ;;
    --plan) plan_only=1; shift ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "gpu-check.sh: --budget takes whole seconds, not '$budget'" >&2; exit 2; }
# --continue: what a first call left, read from its --out: the phases it skipped or cut, the test
# cases it did not finish, and the bf16 probe last (it runs on whatever time is left).
# DIR may also be the first call's --pack archive: the machine that ran the first call is given
# back when it has been idle a while, and a fresh one has only what the second call brings.
continue_tmp=""
if [ -n "${continue_from:-}" ] && [ -f "$continue_from" ]; then
  continue_tmp=$(mktemp -d) || { echo "gpu-check.sh: --continue: cannot make a folder to unpack $continue_from in" >&2; exit 2; }
  trap 'rm -rf "$continue_tmp"' EXIT
  tar -C "$continue_tmp" -xzf "$continue_from" 2>/dev/null ||
    { echo "gpu-check.sh: --continue: $continue_from is neither a folder nor a .tar.gz of one" >&2; exit 2; }
  unpacked=$(find "$continue_tmp" -maxdepth 2 -name skipped.txt | head -1)
  continue_from=$(dirname "${unpacked:-$continue_tmp/none}")
fi
if [ -n "${continue_from:-}" ]; then
  [ -f "$continue_from/skipped.txt" ] && [ -f "$continue_from/cut.txt" ] ||
    { echo "gpu-check.sh: --continue: $continue_from holds no skipped.txt and cut.txt of a first call" >&2; exit 2; }
  [ -z "$only" ] || { echo "gpu-check.sh: --continue takes its phases from the first call: no --only" >&2; exit 2; }
  only="$(cat "$continue_from/skipped.txt" "$continue_from/cut.txt" | sed '/^$/d' | sort -u | tr '\n' ' ')probe"
  only_given=1
  if [ -z "$tests_from" ] && [ -s "$continue_from/gpu-tests-left.txt" ]; then
    tests_from=$continue_from/gpu-tests-left.txt
    [[ " $only " == *" tests "* ]] || only="tests $only"
  fi
  echo "--continue $continue_from: phases $only${tests_from:+; the test cases of $tests_from}"
fi
[ -n "${only_given:-}" ] && [ -z "${only// /}" ] &&
  { echo "gpu-check.sh: --only names no phase (phases: $all_phases)" >&2; exit 2; }
for p in $only; do
  [[ " $all_phases " == *" $p "* ]] || { echo "gpu-check.sh: --only: unknown phase '$p' (phases: $all_phases)" >&2; exit 2; }
done
[ -z "$tests_from" ] || [ -f "$tests_from" ] || { echo "gpu-check.sh: --tests-from: no file $tests_from" >&2; exit 2; }

# The plan of one call with --quick --budget 540 (a 15-minute lease: a minute or two to start the
# machine, one call of 540 s, what it cut in a second call on the warm machine). From the first
# H200 run (2026-12-04): tests took over 180 s (cut), ladder 79, reference 92 (three profiles),
# bottleneck 17, plus 77, dist 9, imagenet 57, resnet50 over 160 (cut); here each phase is sized to
# its cap (see docs/gpu-check.md). setup: preflight, libraries, --version; reserve: SIGKILL grace,
# compare, the page and the pack.
declare -A plan=([setup]=8 [data]=12 [tests]=125 [ladder]=75 [reference]=100 [plus]=50 [decode]=20
                 [resnet50]=50 [bottleneck]=15 [dist]=18 [sanitizer]=32 [imagenet]=20 [fusion]=0 [probe]=0)
reserve=15
if [ -n "$phase_budget_arg" ]; then
  for kv in ${phase_budget_arg//,/ }; do
    k=${kv%%=*} v=${kv#*=}
    [[ " $all_phases " == *" $k "* ]] && [[ "$v" =~ ^[0-9]+$ ]] ||
      { echo "gpu-check.sh: --phase-budget: '$kv' is not PHASE=SECONDS (phases: $all_phases)" >&2; exit 2; }
    plan[$k]=$v
  done
fi
selected() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }
# data runs whenever a phase that reads the generated sets runs.
if [ -n "$only" ] && [[ " $only " != *" data "* ]]; then
  for p in ladder reference plus decode resnet50 bottleneck dist imagenet; do
    selected $p && { only="data $only"; break; }
  done
fi
plan_sum=${plan[setup]}
for p in $all_phases; do selected "$p" && plan_sum=$((plan_sum + ${plan[$p]})); done
# Time no phase's plan claims (a smaller --only, a larger --budget) starts in the bank: each phase
# may use its plan plus the bank, and gives back to it what it leaves unused.
bank=0
[ "$budget" -gt 0 ] && bank=$((budget - reserve - plan_sum))
print_plan() {
  echo "plan (seconds; a phase may also use what earlier phases left unused):"
  printf '  %-11s %5s\n' setup "${plan[setup]}"
  for p in $all_phases; do selected "$p" && printf '  %-11s %5s\n' "$p" "${plan[$p]}"; done
  printf '  %-11s %5s\n' reserve "$reserve"
  echo "  total       $((plan_sum + reserve)) of the budget's ${budget:-0}"
  if [ "$budget" -gt 0 ] && [ "$bank" -lt 0 ]; then
    echo "  over the budget by $((-bank)) s: the phases at the end get what is left, or are skipped"
  fi
}
# --plan: exit 1 when the plan does not fit the budget.
if [ $plan_only = 1 ]; then print_plan; [ "$budget" = 0 ] || [ "$bank" -ge 0 ]; exit; fi

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
trap 'pack_out; [ -z "$continue_tmp" ] || rm -rf "$continue_tmp"' EXIT
die() { echo "gpu-check.sh: $*"; exit 1; }
t0=$(date +%s)
phase_start=$t0
current_phase=setup
phase_cap=${plan[setup]}
times_file=$out/phase-times.tsv
printf 'phase\tplanned_s\tcap_s\ttaken_s\n' > "$times_file"
# Ends the running phase: its seconds go to the log and phase-times.tsv, and what it left of its
# cap goes to the bank.
end_phase() {
  local now taken; now=$(date +%s); taken=$((now - phase_start))
  echo "-- $current_phase: $taken s (total $((now - t0)) s)"
  printf '%s\t%s\t%s\t%s\n' "$current_phase" "${plan[$current_phase]:-}" "${phase_cap:-}" "$taken" >> "$times_file"
  if [ -n "${plan[$current_phase]:-}" ]; then bank=$((bank + ${plan[$current_phase]} - taken)); fi
  phase_start=$now
}
phase() {
  end_phase
  current_phase=$1 phase_cap=""
  echo "== $1"
}
now_s() { date +%s; }
# Seconds left of the whole call (the reserve kept back); very large without --budget.
left() { [ "$budget" -gt 0 ] && [ $rehearse = 0 ] && echo $((t0 + budget - reserve - $(now_s))) || echo 999999; }
# Seconds left of the running phase's cap (its plan plus the bank when it started), at most left().
phase_left() {
  local l; l=$(left)
  if [ "$budget" -gt 0 ] && [ $rehearse = 0 ]; then
    local p=$((phase_start + ${phase_cap:-999999} - $(now_s)))
    [ "$p" -lt "$l" ] && l=$p
  fi
  echo "$l"
}
skipped=()
: > "$out/cut.txt"  # phases stopped at their cap; a file, since limited runs in pipelines' subshells
# SIGTERM (or SIGINT, where the shell that started the script did not ignore it): no further phase
# starts; the page and the pack still run. The running phase's timeout is in a process group of
# its own: signal that group to stop the phase too.
stop=0
trap 'stop=1; echo "gpu-check.sh: signal: no further phase starts"' INT TERM
# A selected phase with time left starts; any other is skipped (and listed when the budget did it).
start() {
  selected "$1" || return 1
  if [ $stop = 1 ]; then
    skipped+=("$1"); echo "== $1: skipped, stopped by a signal"; return 1
  fi
  if [ $rehearse = 0 ] && [ "$(left)" -le 10 ]; then
    skipped+=("$1"); echo "== $1: skipped, the budget is spent"; return 1
  fi
  phase "$1"
  phase_cap=$(( ${plan[$1]} + (bank > 0 ? bank : 0) ))
  if [ "$budget" -gt 0 ] && [ $rehearse = 0 ]; then
    echo "   cap ${phase_cap} s (plan ${plan[$1]}, unused before it $((bank > 0 ? bank : 0))), $(left) s left of the call"
  fi
}
# A command with the phase's time left, or less (CAP s): SIGINT at the limit (trainbench then
# writes what it has), SIGKILL GRACE s later. timeout signals its whole process group, so a
# ladder's rungs stop with it; a phase it stopped is listed in cut.txt.
limited() {
  local cap=$1 grace=$2 l rc; shift 2
  l=$(( $(phase_left) - grace ))
  [ "$cap" -lt "$l" ] && l=$cap
  if [ "$l" -le 3 ]; then
    echo "gpu-check.sh: no time left in $current_phase for: $*"; echo "$current_phase" >> "$out/cut.txt"; return 124
  fi
  timeout -s INT -k "$grace" "$l" "$@"
  rc=$?
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    echo "gpu-check.sh: stopped after $l s: $*"; echo "$current_phase" >> "$out/cut.txt"
  fi
  return $rc
}
within() { limited 999999 8 "$@"; }

# The profiles among "$@" (files under configs/) that a second call still has to run: with
# --continue, those whose report in the first call's PART folder did not end ok. The results page
# merges both calls rung by rung, so a rung is not measured twice while a later one waits.
unfinished() {
  local part=$1; shift
  [ $# -gt 0 ] || return 0
  if [ -z "${continue_from:-}" ]; then printf '%s\n' "$@"; return; fi
  $PY - "$continue_from/$part" "$@" <<'PYEOF'
import json, os, sys
folder, files = sys.argv[1], sys.argv[2:]
for f in files:
    stem = os.path.basename(f)[:-len(".yaml")] if f.endswith(".yaml") else os.path.basename(f)
    try:
        done = json.load(open(os.path.join(folder, stem + ".json"))).get("status") == "ok"
    except (OSError, ValueError, AttributeError):
        done = False
    if done:
        print(f"{os.path.basename(folder)}: {stem} finished in the first call: not run again")
    else:
        print(f"run\t{f}")
PYEOF
}
# The profiles of configs/FOLDER named by rung (the name, or its number: 05 or 05-recipe), in the
# order given, into the array named $1; a name that matches no profile is said and skipped.
rungs_named() {
  local -n named=$1; local folder=$2 n f; shift 2
  named=()
  for n in "$@"; do
    f=$(ls "configs/$folder/$n.yaml" configs/$folder/$n-*.yaml 2>/dev/null | head -1)
    [ -n "$f" ] && named+=("$f") || echo "$folder: no profile configs/$folder/$n: skipped"
  done
}
# unfinished's output: the files to run into the array named $1, its other lines to the log.
keep_unfinished() {
  local -n into=$1; shift
  local line
  into=()
  while IFS= read -r line; do
    if [[ "$line" == run$'\t'* ]]; then into+=("${line#run$'\t'}")
    elif [ -z "${continue_from:-}" ]; then into+=("$line")
    else echo "$line"; fi
  done < <(unfinished "$@")
}

echo "== setup"
[ $rehearse = 1 ] && echo "rehearsal: the plan is shown, not enforced (a CPU is far slower than the GPU it stands for)"
print_plan
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
prefix_libs=""
if [ -n "$prebuilt" ]; then
  [ -x "$prebuilt/prebuilt/trainbench" ] || die "no prebuilt binaries in $prebuilt/prebuilt (scripts/offline-deps.sh)"
  [ -d "$prebuilt/prebuilt/libs" ] || die "no carried libraries in $prebuilt/prebuilt/libs (scripts/offline-deps.sh from this commit)"
elif [ -n "$deps" ]; then
  [ -d "$deps/prefix/usr/include/yaml-cpp" ] || die "no yaml-cpp in $deps/prefix (scripts/offline-deps.sh DIR)"
  [ -f "$deps/prefix/usr/include/postgresql/libpq-fe.h" ] || die "no libpq headers in $deps/prefix (scripts/offline-deps.sh from this commit)"
  prefix_libs="$deps/prefix/usr/lib/x86_64-linux-gnu:$deps/prefix/lib/x86_64-linux-gnu"
else
  die "give --deps DIR or --prebuilt DIR (made by scripts/offline-deps.sh on a Debian machine)"
fi

# Only the libraries this host lacks go on the library path (scripts/lib-missing.sh), never a
# carried copy of one it has: the wheel's LibTorch and CUDA first, then the links made here.
libdir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-libs.XXXXXX")
export LD_LIBRARY_PATH="$libdir:$torch_lib:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -n "$prebuilt" ]; then
  TB=$prebuilt/prebuilt/trainbench
  TESTS=$prebuilt/prebuilt/trainbench_tests
  CROP_CHECK=$prebuilt/prebuilt/trainbench_crop_check
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
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINBENCH_WERROR=OFF \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/prefix/usr;$deps/prefix/usr/lib/x86_64-linux-gnu/cmake;$deps/prefix/usr/share/cmake" \
    -DCMAKE_INCLUDE_PATH="$deps/prefix/usr/include" -DCMAKE_LIBRARY_PATH="$deps/prefix/usr/lib/x86_64-linux-gnu" \
    -DCMAKE_EXE_LINKER_FLAGS="$rpath_link" -DCMAKE_SHARED_LINKER_FLAGS="$rpath_link" -DCMAKE_MODULE_LINKER_FLAGS="$rpath_link" \
    > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; die "cmake failed"; }
  cmake --build build-gpu -j "$(nproc)" || die "build failed"
  TB=$PWD/build-gpu/trainbench
  TESTS=$PWD/build-gpu/tests/trainbench_tests
  CROP_CHECK=$PWD/build-gpu/tests/trainbench_crop_check
  echo "built on this host against the prefix" > "$out/route.txt"
  scripts/lib-missing.sh "$prefix_libs" "$libdir" "$TB" "$TESTS" $(ls build-gpu/tests/*.so 2>/dev/null) |
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

sets=()
[ $quick = 1 ] && sets=(--set measure.repeats=3)
[ $rehearse = 1 ] && sets=(--set device=cpu --set data.image_size=32 --set train.batch_size=8 --set data.workers=1
  --set measure.warmup_batches=1 --set measure.measured_batches=2 --set measure.repeats=2)
backend=$([ $rehearse = 1 ] && echo gloo || echo nccl)
# Every rung and round in a fresh process, the rungs interleaved. --quick: two rounds of the
# article's ladder (the noise between processes), one of the others.
# A rehearsal: one round of each (the same code path; a CPU takes minutes per fp16 round).
rounds=$([ $quick = 1 ] && echo 2 || echo 3)
rounds_other=$([ $quick = 1 ] && echo 1 || echo 3)
[ $rehearse = 1 ] && rounds=1

if start data; then
  # configs/ladder*: a random CIFAR-10-format set (make-dataset) when data/cifar-10-batches-bin is
  # absent, CIFAR-10's 50,000 images (2 s to write): with fewer, PyTorch's DataLoader would start a
  # new epoch, and stall while its workers refill, inside the reference's windows, where
  # trainbench's loader runs on across epochs. configs/imagenet and resnet50/08: dead-leaves JPEGs
  # of ImageNet's sizes in data/imagenet.
  cifar=data/cifar-10-batches-bin
  # batches.meta.txt is written last: a set a cut call left half-written is made again.
  [ -f $cifar/batches.meta.txt ] ||
    within $TB make-dataset cifar10 --out $cifar --samples 50000
  [ -f data/imagenet/GENERATED ] ||
    within $TB make-dataset imagefolder --out data/imagenet --classes 10 --per-class $([ $rehearse = 1 ] && echo 10 || echo 100)
fi

tests_rc=0
if start tests; then
  # Each [gpu] test case within the phase's time (scripts/gpu-tests.sh: group processes, then alone).
  tests_s=$(phase_left); [ "$tests_s" -gt 0 ] || tests_s=0
  bash scripts/gpu-tests.sh --tests "$TESTS" --out "$out" --seconds "$tests_s" --python "$PY" \
    ${tests_from:+--tests-from "$tests_from"} $([ $rehearse = 1 ] && echo --rehearse)
  tests_rc=$?
  [ $tests_rc = 2 ] && die "the tests phase could not start (above)"
  [ -s "$out/gpu-tests-left.txt" ] && echo tests >> "$out/cut.txt"
fi

if start ladder; then
  keep_unfinished ladder_files ladder configs/ladder/*.yaml
  [ ${#ladder_files[@]} -gt 0 ] &&
    within $TB ladder "${ladder_files[@]}" --out "$out/ladder" --rounds $rounds --quiet "${sets[@]}"
fi

if start reference; then
  # The PyTorch reference (scripts/reference/pytorch_run.py) of the profiles below, in this order:
  # the compile rung (06) and PyTorch's best configuration (configs/best 00 and 01, fp16 first;
  # best/02's resize on the GPU has no counterpart there), which the goals read; then torch.compile + overlap (07, the first run's comparison: Inductor's cache of
  # 06's graph makes it cheaper) and two eager rungs. Each torch.compile takes tens of seconds, so
  # what 100 s cuts is the last. Globs under configs/; one that matches no file (a rung not added
  # yet) is named in the log and skipped. GPU_CHECK_REFERENCE overrides.
  # Reports: pytorch/ for configs/ladder, pytorch-<folder>/ for any other folder.
  if [ $quick = 1 ]; then
    ref_default="ladder/06-* best/00-* best/01-* ladder/07-* ladder/04-* ladder/00-*"
  else
    ref_default="ladder/06-* best/00-* best/01-* ladder/*.yaml ladder-plus/*.yaml"
  fi
  # A second call runs only the rungs the first did not finish. A torch.compile rung takes about
  # a minute to its first window (59 s cold on the first run): one that would start with less than
  # 70 s of the phase left is left for a second call, and the eager rungs after it run now.
  declare -A ref_done=()
  ref_deferred=0
  for pattern in ${GPU_CHECK_REFERENCE:-$ref_default}; do
    files=$(ls configs/$pattern 2>/dev/null | grep '\.yaml$')
    [ -n "$files" ] || { echo "reference: no profile configs/$pattern: skipped"; continue; }
    for f in $files; do
      [ -n "${ref_done[$f]:-}" ] && continue
      ref_done[$f]=1
      folder=$(basename "$(dirname "$f")")
      part=pytorch$([ "$folder" = ladder ] || echo "-$folder")
      keep_unfinished ref_keep "$part" "$f"
      [ ${#ref_keep[@]} -gt 0 ] || continue
      n=$(basename "$f" .yaml)
      if [ $rehearse = 0 ] && [ "$(phase_left)" -lt 70 ] && $TB show -c "$f" 2>/dev/null | grep -q '^  compile: true'; then
        echo "reference $folder/$n: torch.compile with $(phase_left) s left: left for a second call"
        ref_deferred=1
        continue
      fi
      mkdir -p "$out/$part"
      within $PY scripts/reference/pytorch_run.py --trainbench "$TB" --config "$f" "${sets[@]}" --out "$out/$part/$n.json" ||
        echo "reference $folder/$n failed"
    done
  done
  [ $ref_deferred = 1 ] && echo reference >> "$out/cut.txt"
fi

if start plus; then
  # First trainbench's side of PyTorch's best configuration (configs/best: the same profiles the
  # reference ran; the 1.25x goal's numerator), then the fp16 compiled step with its ReLU fusions
  # on cuDNN's batch-norm Ex call instead of the graphs (backend.fused_batch_norm: ex: which of the
  # two routes is faster, the page's best table), then ladder-plus: with --quick only the rungs
  # the goals read, in the ladder's order (02 and 03: fp16 against bf16, eager; 06: the compiled
  # step on the ceiling).
  if ls configs/best/*.yaml > /dev/null 2>&1; then
    keep_unfinished best_files best configs/best/*.yaml
    [ ${#best_files[@]} -gt 0 ] &&
      within $TB ladder "${best_files[@]}" --out "$out/best" --rounds $rounds_other --quiet "${sets[@]}"
    keep_unfinished ex_file best 00-compile-fp16-ex
    [ ${#ex_file[@]} -gt 0 ] &&
      { within $TB run -q -c configs/best/00-compile-fp16.yaml --set backend.fused_batch_norm=ex \
          --processes $rounds_other "${sets[@]}" --out "$out/best/00-compile-fp16-ex.json" || echo "best fp16 ex failed"; }
  else
    echo "plus: no configs/best: skipped"
  fi
  plus_files=(configs/ladder-plus/*.yaml)
  [ $quick = 1 ] && rungs_named plus_files ladder-plus 02 03 06
  keep_unfinished plus_files ladder-plus "${plus_files[@]}"
  [ ${#plus_files[@]} -gt 0 ] &&
    within $TB ladder "${plus_files[@]}" --out "$out/ladder-plus" --rounds $rounds_other --quiet "${sets[@]}"
fi

if start decode; then
  # bench-data on the JPEGs with the goal's profiles (configs/decode: batch 256, RandomResizedCrop
  # 224, 16 loader workers): decoded by libjpeg-turbo in the workers (host.yaml, one worker per
  # core of this host) and by nvJPEG on the GPU (device.yaml), then the device with 35% of each
  # batch decoded by the workers (data.device_decode_share 0.65, DALI's default hw_decoder_load:
  # engines and cores together), the device decoding whole images (data.partial_decode: false:
  # what the engines' regions of interest buy), and the device with the files the engines cannot
  # take on nvJPEG's general backend (data.decode_off_engines: device: what decoding them in the
  # workers buys); ratios on the page.
  mkdir -p "$out/decode"
  # A second call runs the modes the first did not finish.
  keep_unfinished decode_modes decode device host device-share device-whole device-general
  for mode in "${decode_modes[@]}"; do
    extra=()
    [ $mode = host ] && extra=(--set data.workers=$(nproc))
    [ $mode = device-share ] && extra=(--set data.device_decode_share=0.65)
    [ $mode = device-whole ] && extra=(--set data.partial_decode=false)
    [ $mode = device-general ] && extra=(--set data.decode_off_engines=device)
    within $TB bench-data -q -c configs/decode/${mode%%-*}.yaml "${extra[@]}" \
      --processes $rounds_other "${sets[@]}" --out "$out/decode/$mode.json" || echo "bench-data $mode failed"
  done
fi

if start resnet50; then
  # ResNet-50 to NVIDIA's recipe. --quick runs, in this order (what is cut comes last): the
  # compiled step on input made on the device (09: its rate against MLPerf's), the same with the
  # convolution fusions (12: what they buy), the eager recipe on it (06: what compiling buys), the compiled step with the stem padded to 4 channels (11: what
  # that buys), on JPEGs (08: JPEG / device-made input, eager), the compiled step on JPEGs (10: the
  # same for the compiled step), then the graph alone (07) and the host's loader (05). The reports
  # carry the share of the tensor-core peak. GPU_CHECK_RESNET50 (rung names) overrides.
  r50=("${sets[@]}")
  r50_files=(configs/resnet50/*.yaml)
  if [ $quick = 1 ]; then
    [ $rehearse = 0 ] && r50+=(--set measure.measured_batches=10)
    rungs_named r50_files resnet50 ${GPU_CHECK_RESNET50:-09-compile 12-compile-conv-fusion 06-recipe-device-synthetic \
      11-compile-pad-stem \
      08-recipe-imagefolder 10-compile-imagefolder 07-cuda-graph 05-recipe}
  fi
  keep_unfinished r50_files resnet50 "${r50_files[@]}"
  [ ${#r50_files[@]} -gt 0 ] &&
    within $TB ladder "${r50_files[@]}" --out "$out/resnet50" --rounds $rounds_other --quiet "${r50[@]}"
  # Then the compiled step on JPEGs (10) with the loader's workers decoding 35% of each batch beside
  # the JPEG engines (data.device_decode_share 0.65, the decode phase's device-share): whether the
  # engines and the cores together feed it better than the engines alone. Last: a cut drops it first.
  if [ $quick = 1 ] && [ -z "${GPU_CHECK_RESNET50:-}" ]; then
    keep_unfinished share_files resnet50-share configs/resnet50/10-compile-imagefolder.yaml
    [ ${#share_files[@]} -gt 0 ] &&
      within $TB ladder "${share_files[@]}" --out "$out/resnet50-share" --rounds $rounds_other --quiet "${r50[@]}" \
        --set data.device_decode_share=0.65
  fi
fi

if start bottleneck; then
  # Each rung against its compute ceiling (same step, one reused device batch), interleaved.
  for n in 07-stream-overlap 01-workers; do
    within $TB bottleneck -c configs/ladder/$n.yaml --rounds 2 --out "$out/bottleneck/$n" --quiet "${sets[@]}" ||
      echo "bottleneck $n failed"
  done
fi

if start dist; then
  # One GPU: NCCL with one rank (NCCL needs a GPU per rank), against the ladder's rung as baseline.
  # The ladder's 04 as baseline, only if it finished (a refused baseline would stop the run).
  base=$(ls "$out"/ladder/*04-amp*.json 2>/dev/null | head -1)
  [ -n "$base" ] && ! grep -q '"status": "ok"' "$base" && base=""
  # The rank gets the environment torchrun gives a worker (RANK, WORLD_SIZE, LOCAL_RANK,
  # MASTER_ADDR, MASTER_PORT, ...; distributed/launch.cpp reads it) rather than torchrun itself:
  # torchrun starts its worker in a session of its own, which timeout's group signal misses, and
  # waits up to 30 s after forwarding SIGINT, a grace this phase cannot spare. The CPU suite runs
  # torchrun itself.
  within env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 GROUP_RANK=0 ROLE_RANK=0 ROLE_WORLD_SIZE=1 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29561 TORCHELASTIC_RESTART_COUNT=0 "$TB" run \
    --config configs/ladder/04-amp.yaml --set dist.backend=$backend "${sets[@]}" --out "$out/dist-$backend-1.json" \
    ${base:+--baseline "$base"} || echo "data-parallel $backend run failed"
fi

if start sanitizer; then
  # compute-sanitizer memcheck (out-of-bounds and misaligned accesses, leaks of device memory) and
  # racecheck (shared-memory hazards). First, both on trainbench_crop_check: our one kernel (the
  # fused crop) against its CPU reference, every image and the output an allocation of its exact
  # size, in a program without LibTorch that starts in a second under the sanitizer. Then, with
  # what is left, [gpu] test cases of the LibTorch binary, whose start under the sanitizer takes
  # tens of seconds: nvJPEG's decode into the batch (the engines' regions and the kernel in place),
  # and the copy stream; --quick runs memcheck on the decode case only. PyTorch's caching
  # allocator hides its blocks' bounds from memcheck: turned off for it. Each run gets an equal
  # share of what is left of the phase. A rehearsal runs the crop check without the sanitizer: it
  # must load and say it found no CUDA device.
  cs=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  sanitized=("nvJPEG decode + device crop gives the host path's batches within IDCT tolerance"
             "copy stream delivers every batch intact\\, with slow and fast steps")
  case_tools=(memcheck racecheck)
  [ $quick = 1 ] && { sanitized=("${sanitized[0]}"); case_tools=(memcheck); }
  [ -x "${CROP_CHECK:-}" ] || { echo "no trainbench_crop_check (a build without CUDA?): the kernel's own runs skipped"; CROP_CHECK=""; }
  if [ $rehearse = 1 ]; then
    if [ -n "$CROP_CHECK" ]; then
      "$CROP_CHECK" | tee "$out/sanitizer-memcheck.txt"
      grep -q "no CUDA device" "$out/sanitizer-memcheck.txt" ||
        echo "crop check: broken (expected 'no CUDA device')" | tee -a "$out/sanitizer-memcheck.txt"
    fi
    echo "a rehearsal: no compute-sanitizer runs" | tee -a "$out/sanitizer-memcheck.txt"
  elif [ ! -x "$cs" ]; then
    echo "no compute-sanitizer (PATH, \$CUDA_HOME/bin): the crop check runs without it" |
      tee "$out/sanitizer-memcheck.txt"
    [ -n "$CROP_CHECK" ] && limited 60 5 "$CROP_CHECK" 2>&1 | tee -a "$out/sanitizer-memcheck.txt"
  else
    runs=()  # tool<TAB>name of a [gpu] case, or "crop" for the crop check
    if [ -n "$CROP_CHECK" ]; then runs+=($'memcheck\tcrop' $'racecheck\tcrop'); fi
    for tool in "${case_tools[@]}"; do
      for t in "${sanitized[@]}"; do runs+=("$tool"$'\t'"$t"); done
    done
    # A second call runs only what the first did not finish (sanitizer-done.txt: tool<TAB>run).
    if [ -n "${continue_from:-}" ] && [ -s "$continue_from/sanitizer-done.txt" ]; then
      left=()
      for r in "${runs[@]}"; do
        if grep -qxF "$r" "$continue_from/sanitizer-done.txt"; then echo "sanitizer: $r finished in the first call: not run again"
        else left+=("$r"); fi
      done
      runs=("${left[@]}")
    fi
    : > "$out/sanitizer-memcheck.txt"; : > "$out/sanitizer-racecheck.txt"; : > "$out/sanitizer-done.txt"
    runs_left=${#runs[@]}
    for r in "${runs[@]}"; do
      IFS=$'\t' read -r tool t <<< "$r"
      extra=(); [ $tool = memcheck ] && extra=(--leak-check full)
      share=$(( $(phase_left) / runs_left )); runs_left=$((runs_left - 1))
      # A test case of the LibTorch binary takes tens of seconds to start under the sanitizer:
      # with less than 45 s for it, it waits for a second call instead of being cut for nothing.
      if [ "$t" != crop ] && [ "$share" -lt 45 ]; then
        echo "sanitizer: $tool on '$t' with $share s: left for a second call"
        echo sanitizer >> "$out/cut.txt"
        continue
      fi
      if [ "$t" = crop ]; then
        echo "== $tool: trainbench_crop_check" >> "$out/sanitizer-$tool.txt"
        limited "$share" 5 "$cs" --tool $tool "${extra[@]}" --error-exitcode 9 "$CROP_CHECK" 2>&1 |
          tee -a "$out/sanitizer-$tool.txt"
      else
        echo "== $tool: $t" >> "$out/sanitizer-$tool.txt"
        PYTORCH_NO_CUDA_MEMORY_CACHING=$([ $tool = memcheck ] && echo 1 || echo 0) \
          limited "$share" 5 "$cs" --tool $tool "${extra[@]}" --error-exitcode 9 $TESTS "$t" -w NoTests 2>&1 |
          tee -a "$out/sanitizer-$tool.txt"
      fi
      rc=${PIPESTATUS[0]}
      echo "compute-sanitizer $tool: exit $rc" | tee -a "$out/sanitizer-$tool.txt"
      [ "$rc" != 124 ] && [ "$rc" != 137 ] && printf '%s\n' "$r" >> "$out/sanitizer-done.txt"
    done
  fi
fi

if start imagenet; then
  # The ladder on JPEGs: host decoding in the loader's threads up to nvJPEG on the GPU. --quick
  # runs the rungs the goals read: host decode with the copy stream (04), device decode (05), and
  # device decode under AMP, NHWC and the graph (08, a compute-bound step the decode must hide
  # behind); the first run's nine rungs took 57 s. GPU_CHECK_IMAGENET (rung names) overrides.
  imagenet_files=(configs/imagenet/*.yaml)
  [ $quick = 1 ] && rungs_named imagenet_files imagenet ${GPU_CHECK_IMAGENET:-04-copy-stream 05-device-decode 08-cuda-graph}
  keep_unfinished imagenet_files imagenet "${imagenet_files[@]}"
  [ ${#imagenet_files[@]} -gt 0 ] &&
    within $TB ladder "${imagenet_files[@]}" --out "$out/imagenet" --rounds $rounds_other --quiet "${sets[@]}"
fi

if start fusion; then
  # Whether MLPerf's convolution fusions would pay (trainbench fusion-bench): every "batch norm,
  # ReLU, convolution" pair of the ResNet-50 recipe and of ResNet-18's best configuration, per
  # shape, the cuDNN graphs that fold the batch norm into the convolutions against what
  # backend.compile runs, alternating. No time of its own: what the phases before it left, and a
  # second call's. Each JSON is rewritten after every shape, so a cut keeps what was measured.
  fusion_profiles=(resnet50:configs/resnet50/09-compile.yaml resnet18:configs/best/00-compile-fp16.yaml)
  for fp in "${fusion_profiles[@]}"; do
    name=${fp%%:*} file=${fp#*:}
    if [ $rehearse = 1 ]; then
      # On the CPU it must refuse with the device's key: the command and the profile are checked.
      $TB fusion-bench -c "$file" "${sets[@]}" > "$out/fusion-$name.txt" 2>&1
      rc=$?
      if [ $rc = 2 ] && grep -q "key 'device'" "$out/fusion-$name.txt"; then
        echo "fusion-bench $name on the CPU: exit 2, the device named, as expected"
      else
        echo "fusion-bench $name on the CPU: exit $rc, UNEXPECTED (2 naming the device key expected)"; cat "$out/fusion-$name.txt"
      fi
      continue
    fi
    if [ -n "${continue_from:-}" ] && grep -q '"per_step"' "$continue_from/fusion-$name.json" 2>/dev/null; then
      echo "fusion-bench $name finished in the first call: not run again"; continue
    fi
    if [ "$(phase_left)" -lt 30 ]; then
      echo "fusion: $(phase_left) s left, too few for fusion-bench $name: left for a second call"
      echo fusion >> "$out/cut.txt"; break
    fi
    within $TB fusion-bench -c "$file" --rounds 3 --calls 5 -o "$out/fusion-$name.json" > "$out/fusion-$name.txt" 2>&1 ||
      echo "fusion-bench $name failed or was cut (fusion-$name.txt)"
    tail -4 "$out/fusion-$name.txt"
  done
fi

if start probe; then
  # The bf16 goal's evidence (scripts/bf16-probe.py): batch norm against the convolutions per dtype
  # at the ladder's shapes, PyTorch's batch-norm backend per dtype, one step's kernels per dtype.
  # No time of its own: what the phases before it left.
  if [ $rehearse = 1 ]; then
    echo "a rehearsal: the bf16 probe needs a GPU; its script is only parsed here"
    $PY -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' scripts/bf16-probe.py && echo "bf16-probe.py parses"
  elif [ "$(phase_left)" -lt 40 ]; then
    # It times two dtypes' ops and steps: under 40 s it would be cut before it says anything.
    skipped+=(probe); echo "probe: $(phase_left) s left, too few for the bf16 probe: skipped"
  else
    within $PY scripts/bf16-probe.py --json "$out/bf16-probe.json" > "$out/bf16-probe.txt" 2>&1 ||
      echo "bf16 probe failed or was cut (bf16-probe.txt)"
    tail -5 "$out/bf16-probe.txt"
  fi
fi

phase "results"
printf '%s\n' "${skipped[@]}" > "$out/skipped.txt"
sort -u -o "$out/cut.txt" "$out/cut.txt"
[ -s "$out/cut.txt" ] && echo "stopped by their caps: $(tr '\n' ' ' < "$out/cut.txt")"
[ ${#skipped[@]} -gt 0 ] && echo "skipped (budget): ${skipped[*]}"
# The reference against trainbench's rungs of the same profiles: pytorch/ against ladder/,
# pytorch-<folder>/ against <folder>/.
for d in "$out"/pytorch*; do
  [ -d "$d" ] || continue
  name=${d##*/}
  if [ "$name" = pytorch ]; then ours=$out/ladder md=$out/compare.md
  else ours=$out/${name#pytorch-} md=$out/compare-${name#pytorch-}.md; fi
  [ -d "$ours" ] && timeout 20 $TB compare "$d" "$ours" --format markdown | tee "$md"
done
# Bounded too: the reserve is all that is left of the call for these and the pack.
timeout 30 $PY scripts/results-page.py --out-dir "$out" > "$out/results.md" || echo "results page failed"

end_phase
echo "== end: $(($(now_s) - t0)) s of ${budget} (phase-times.tsv)"
column -t -s $'\t' "$times_file" 2>/dev/null || cat "$times_file"
echo "gpu tests exit code: $tests_rc; everything is in $out"
pack_out
exit $tests_rc
