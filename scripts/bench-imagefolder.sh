#!/usr/bin/env bash
# The ImageNet-style loader alone, trainbench against torchvision, on the same JPEG folder with
# the same train transform (RandomResizedCrop + flip + ToTensor + Normalize), batch 64:
#   tv-pil     torchvision ImageFolder + DataLoader, PIL decoding (torchvision's default)
#   tv-decode  the same with torchvision.io.decode_jpeg and transforms.v2
#   tb         trainbench bench-data (libjpeg-turbo, partial decoding)
#   tb-full    trainbench with data.partial_decode: false (every file decoded whole)
# All sides run interleaved, round after round, at each worker count; the load average is
# recorded beside every measurement. Prints medians, ranges and ratios; raw outputs stay in --out.
# Then scripts/jpeg-floor.cpp: libjpeg-turbo's own cost of whole, entropy-only and partial decodes.
#   usage: scripts/bench-imagefolder.sh [--workers "1 2"] [--rounds R] [--batches K] [--data DIR] [--out DIR]
# The script runs from the repository root: relative --data and --out are taken from there, and
# the profiles it writes keep --data as given (so the defaults publish no machine's paths).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
workers="1 2" rounds=3 batches=10 size=224 batch=64
data=reports/bench-imagefolder/data out=reports/bench-imagefolder
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--workers \"1 2\"] [--rounds R] [--batches K] [--data DIR] [--out DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out/raw"
if [ ! -f "$data/GENERATED" ]; then
  ./build/trainbench make-dataset imagefolder --out "$data" --classes 10 --per-class 100 | tee "$out/dataset.txt"
fi
raw=$out/raw
for w in $workers; do
  for full in false true; do
    cat > "$out/tb-w$w-full-$full.yaml" <<YAML
name: tb-w$w$([ $full = true ] && echo -full)
device: cpu
threads: 1
model: {num_classes: 10}
data: {source: imagefolder, path: $data, image_size: $size, workers: $w, partial_decode: $([ $full = true ] && echo false || echo true)}
train: {batch_size: $batch}
measure: {warmup_batches: 2, measured_batches: $batches, repeats: 3, nvtx: off}
YAML
  done
done
for r in $(seq 1 "$rounds"); do
  for w in $workers; do
    for side in tb tv-pil tv-decode tb-full; do
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      case $side in
        tb|tb-full)
          full=false; [ $side = tb-full ] && full=true
          ./build/trainbench bench-data --quiet --config "$out/tb-w$w-full-$full.yaml" \
            --out "$raw/$side-w$w-r$r.json" > /dev/null
          rate=$("$TRAINBENCH_PYTHON" -c "import json,statistics;j=json.load(open('$raw/$side-w$w-r$r.json'));print(statistics.median(x['samples_per_s'] for x in j['results']['repeats']))")
          ;;
        tv-pil|tv-decode)
          kind=pil; [ $side = tv-decode ] && kind=decode_jpeg
          "$TRAINBENCH_PYTHON" scripts/reference/imagefolder_loader.py --root "$data/train" --side $kind \
            --workers "$w" --batch $batch --size $size --batches "$batches" --windows 3 > "$raw/$side-w$w-r$r.json"
          rate=$("$TRAINBENCH_PYTHON" -c "import json,statistics;print(statistics.median(json.load(open('$raw/$side-w$w-r$r.json'))['windows']))")
          ;;
      esac
      echo "$r $w $side $rate $load" | tee -a "$raw/rounds.txt"
    done
  done
done
# What no loader on libjpeg-turbo can avoid on these files: the entropy decoding of every row
# down to a crop's last one (thread CPU time, no other process's share).
g++ -O2 -std=c++17 scripts/jpeg-floor.cpp -ljpeg -o build/jpeg-floor && build/jpeg-floor "$data/train" | tee "$out/jpeg-floor.txt"
"$TRAINBENCH_PYTHON" - "$raw" <<'PY'
import glob, json, statistics, sys
raw = sys.argv[1]
rows = [l.split() for l in open(f"{raw}/rounds.txt")]
def rates(side, w):
    return [float(r[3]) for r in rows if r[1] == w and r[2] == side]
print("\n| workers | side | samples/s median | range over rounds |\n|---|---|---:|---|")
for w in sorted({r[1] for r in rows}):
    for side in ["tb", "tb-full", "tv-decode", "tv-pil"]:
        x = rates(side, w)
        if x:
            print(f"| {w} | {side} | {statistics.median(x):.1f} | {min(x):.1f} - {max(x):.1f} |")
print()
for w in sorted({r[1] for r in rows}):
    tb = statistics.median(rates("tb", w))
    best = max(statistics.median(rates("tv-decode", w)), statistics.median(rates("tv-pil", w)))
    print(f"workers {w}: trainbench / torchvision's fastest = {tb / best:.2f}x, "
          f"/ decode_jpeg+v2 = {tb / statistics.median(rates('tv-decode', w)):.2f}x, "
          f"/ PIL = {tb / statistics.median(rates('tv-pil', w)):.2f}x")
for w in sorted({r[1] for r in rows}):
    per = {}
    for side in ["tb", "tb-full"]:
        vals = []
        for f in glob.glob(f"{raw}/{side}-w{w}-r*.json"):
            p = json.load(open(f))["results"]["loader"]["per_image_s"]
            vals.append({k: v["median"] for k, v in p.items()})
        per[side] = {k: 1000 * statistics.median(v[k] for v in vals) for k in vals[0]} if vals else {}
    if per["tb"] and per["tb-full"]:
        print(f"workers {w}: per image (ms, median of rounds) partial: " +
              ", ".join(f"{k} {v:.3f}" for k, v in per["tb"].items()) +
              "; whole-file decode: " + ", ".join(f"{k} {v:.3f}" for k, v in per["tb-full"].items()))
loads = [float(r[4]) for r in rows]
print(f"1-minute load average during the runs: {min(loads):.1f} - {max(loads):.1f}")
PY
