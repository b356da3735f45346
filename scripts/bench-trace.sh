#!/usr/bin/env bash
# What --trace costs: the same profile run with and without a trace, interleaved round after round
# (off, on, on, off, ...: drift hits both alike), the load average recorded beside each run.
# Prints each run's median samples/s and the median of the per-round ratios on / off.
#   usage: scripts/bench-trace.sh PROFILE [--rounds R] [--out DIR] [--set key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
[ $# -ge 1 ] || { echo "usage: $0 PROFILE [--rounds R] [--out DIR] [--set key=value ...]" >&2; exit 2; }
profile=$1
shift
rounds=4 out=reports/bench-trace sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "usage: $0 PROFILE [--rounds R] [--out DIR] [--set key=value ...]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
run_side() {  # side round
  local trace=()
  [ "$1" = on ] && trace=(--trace "$out/trace-$2.json")
  echo "load $(cut -d' ' -f1 /proc/loadavg)" > "$out/$1-$2.load"
  ./build/trainbench run -c "$profile" "${sets[@]}" --out "$out/$1-$2.json" -q "${trace[@]}" > "$out/$1-$2.log" 2>&1
}
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then run_side off "$r"; run_side on "$r"; else run_side on "$r"; run_side off "$r"; fi
done
"$TRAINBENCH_PYTHON" - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
ratios = []
for r in range(1, rounds + 1):
    v = {}
    for side in ("off", "on"):
        v[side] = json.load(open(f"{out}/{side}-{r}.json"))["results"]["samples_per_s"]["median"]
    load = open(f"{out}/off-{r}.load").read().split()[1]
    ratios.append(v["on"] / v["off"])
    print(f"round {r}: off {v['off']:.1f}  on {v['on']:.1f} samples/s  on/off {ratios[-1]:.3f}  (load {load})")
print(f"median on/off over {rounds} rounds: {statistics.median(ratios):.3f} (range {min(ratios):.3f} to {max(ratios):.3f})")
PY
