#!/usr/bin/env bash
# trainbench against the equivalent PyTorch loop, interleaved in one run, then `trainbench compare`.
#   usage: scripts/bench-vs-pytorch.sh [--rounds N] [--out DIR] [--nproc N] [--set key=value ...] CONFIG...
# Each round runs every profile once on each side, trainbench first in odd rounds and Python
# first in even ones (ABBA), so machine noise, and its drift during a round, hits both alike;
# the windows of all rounds are pooled per side before comparing.
# --nproc N starts both sides with torchrun (N ranks on this machine; set dist.backend): trainbench's
# bucketed all-reduce against DistributedDataParallel, each reporting the job's samples/s.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
rounds=3
out=reports/vs-pytorch
sets=()
configs=()
nproc=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    --nproc) nproc=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || { echo "usage: $0 [--rounds N] [--out DIR] [--set k=v] CONFIG..." >&2; exit 2; }
[ -x build/trainbench ] || { echo "bench-vs-pytorch.sh: build first (scripts/setup.sh)" >&2; exit 2; }
[ -x "$TRAINBENCH_PYTHON" ] || { echo "bench-vs-pytorch.sh: no Python environment at $TRAINBENCH_VENV (scripts/setup.sh)" >&2; exit 2; }
rm -rf "$out"; mkdir -p "$out/rounds" "$out/trainbench" "$out/pytorch"
tb=(./build/trainbench run)
py=("$TRAINBENCH_PYTHON" scripts/reference/pytorch_run.py)
if [ "$nproc" -gt 0 ]; then
  launch=("$TRAINBENCH_PYTHON" -m torch.distributed.run --nproc-per-node "$nproc" --master-port 29533)
  tb=("${launch[@]}" --no-python ./build/trainbench run)
  py=("${launch[@]}" scripts/reference/pytorch_run.py)
fi
for r in $(seq 1 "$rounds"); do
  for c in "${configs[@]}"; do
    n=$(basename "$c" .yaml)
    echo "== round $r/$rounds: $n"
    run_tb() { "${tb[@]}" --quiet --config "$c" "${sets[@]}" --out "$out/rounds/tb-$n-$r.json" > /dev/null; }
    run_py() { "${py[@]}" --config "$c" "${sets[@]}" --out "$out/rounds/py-$n-$r.json" > /dev/null; }
    if [ $((r % 2)) = 1 ]; then run_tb; run_py; else run_py; run_tb; fi
  done
done
# Pool the rounds: one report per side and profile, with every window.
"$TRAINBENCH_PYTHON" - "$out" <<'PY'
import json, statistics, sys, glob, os
out = sys.argv[1]
for side, folder in (("tb", "trainbench"), ("py", "pytorch")):
    groups = {}
    for f in sorted(glob.glob(f"{out}/rounds/{side}-*.json")):
        groups.setdefault(f.rsplit("-", 1)[0], []).append(json.load(open(f)))
    for key, reps in groups.items():
        merged = reps[0]
        merged["results"]["repeats"] = [w for r in reps for w in r["results"]["repeats"]]
        rates = [w["samples_per_s"] for w in merged["results"]["repeats"]]
        # Recompute the whole summary over the pooled windows, with the report's definitions
        # (linear-interpolation quartiles, sample standard deviation).
        q1, med, q3 = statistics.quantiles(rates, n=4, method="inclusive") if len(rates) > 1 else (rates[0],) * 3
        mean = statistics.fmean(rates)
        sd = statistics.stdev(rates) if len(rates) > 1 else 0.0
        merged["results"]["samples_per_s"].update(median=med, q1=q1, q3=q3, min=min(rates), max=max(rates), mean=mean,
                                                  stdev=sd, cv=sd / mean if mean else 0.0, n=len(rates))
        merged["measure"]["repeats"] = len(rates)
        name = os.path.basename(key)[len(side) + 1:]
        json.dump(merged, open(f"{out}/{folder}/{name}.json", "w"), indent=2)
PY
echo
echo "base = PyTorch reference, candidate = trainbench (FASTER means trainbench is faster):"
./build/trainbench compare "$out/pytorch" "$out/trainbench" --format markdown | tee "$out/compare.md" || true
