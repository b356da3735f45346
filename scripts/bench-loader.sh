#!/usr/bin/env bash
# trainbench's loader against torch.utils.data.DataLoader + torchvision CIFAR10 with the same
# Resize/ToTensor/Normalize, the same workers and batch size, on the same random CIFAR-format
# data. Both sides run interleaved in one script; prints samples/s per side and the ratio.
#   usage: scripts/bench-loader.sh [--workers N] [--batch B] [--size S] [--batches K] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
workers=2 batch=64 size=224 batches=20 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "usage: $0 [--workers N] [--batch B] [--size S] [--batches K] [--rounds R]" >&2; exit 2 ;;
  esac
done
out=reports/bench-loader
data=$out/cifar-10-batches-bin
mkdir -p "$out"
[ -f "$data/data_batch_1.bin" ] || ./build/trainbench make-dataset cifar10 --out "$data" --samples 10000 > /dev/null
profile=$out/loader.yaml
cat > "$profile" <<YAML
name: bench-loader
device: cpu
threads: 1
data: {source: cifar10, path: cifar-10-batches-bin, image_size: $size, workers: $workers, prefetch_factor: 2}
train: {batch_size: $batch}
measure: {warmup_batches: 2, measured_batches: $batches, repeats: 1, nvtx: off}
YAML
tb=() py=()
for r in $(seq 1 "$rounds"); do
  ./build/trainbench bench-data --quiet --config "$profile" --out "$out/tb-$r.json" > /dev/null
  tb+=("$("$TRAINBENCH_PYTHON" -c "import json;print(json.load(open('$out/tb-$r.json'))['results']['samples_per_s']['median'])")")
  "$TRAINBENCH_PYTHON" scripts/reference/pytorch_run.py --data-only --config "$profile" --out "$out/py-$r.json" > /dev/null
  py+=("$("$TRAINBENCH_PYTHON" -c "import json;print(json.load(open('$out/py-$r.json'))['results']['samples_per_s']['median'])")")
  echo "round $r: trainbench ${tb[-1]} samples/s, PyTorch DataLoader ${py[-1]} samples/s"
done
"$TRAINBENCH_PYTHON" - "${tb[*]}" "${py[*]}" "$workers" "$batch" "$size" <<'PY'
import statistics, sys
tb = [float(x) for x in sys.argv[1].split()]; py = [float(x) for x in sys.argv[2].split()]
w, b, s = sys.argv[3:6]
print(f"\nloader only, {w} workers, batch {b}, {s}x{s}, CIFAR-format data")
print("| side | samples/s (median of rounds) |\n|---|---:|")
print(f"| trainbench bench-data | {statistics.median(tb):.1f} |")
print(f"| torch DataLoader + torchvision CIFAR10 | {statistics.median(py):.1f} |")
print(f"ratio trainbench / PyTorch: {statistics.median(tb) / statistics.median(py):.2f}x")
PY
