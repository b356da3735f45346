#!/usr/bin/env bash
# The alpha-beta model of the namespace link, and its check against a real two-host step.
#   usage: scripts/netns-alpha-beta.sh [--out DIR] [--prefix P]      (root; default reports/alpha-beta, tbab)
# On a fresh two-node cluster (scripts/netns-cluster.sh): Gloo all-reduce time against message size
# across the link (scripts/alpha-beta.py measure, under torchrun), the fit, then trainbench's
# two-host run of a small ResNet-18 profile and the same profile as one process on node 0 (its
# --baseline), and the fit's prediction for that run's buckets against what it measured.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
out=reports/alpha-beta prefix=tbab
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "netns-alpha-beta.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -x build/trainbench ] || { echo "netns-alpha-beta.sh: build first (scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
tb=$(pwd)/build/trainbench
cluster=(scripts/netns-cluster.sh --prefix "$prefix")
"${cluster[@]}" up
trap '"${cluster[@]}" down' EXIT
addr0=$("${cluster[@]}" addr 0)
launch=("$TRAINBENCH_PYTHON" -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d
        --rdzv-endpoint "$addr0:29400")
sent() { cat "/sys/class/net/$prefix-v1/statistics/rx_bytes"; }

before=$(sent)
"${cluster[@]}" exec 1 "${launch[@]}" --rdzv-id ab scripts/alpha-beta.py measure --out /dev/null > "$out/measure-node1.log" 2>&1 &
"${cluster[@]}" exec 0 "${launch[@]}" --rdzv-id ab scripts/alpha-beta.py measure --out "$out/allreduce.json" > "$out/measure-node0.log" 2>&1
wait
echo "node 1 sent $(( ($(sent) - before) / 1000000 )) MB over its link while measuring"
"$TRAINBENCH_PYTHON" scripts/alpha-beta.py fit "$out/allreduce.json" | tee "$out/fit.txt"

cat > "$out/profile.yaml" << 'EOF'
name: alpha-beta-check
device: cpu
seed: 1
threads: 1
model: {arch: resnet18, num_classes: 10}
data: {source: synthetic, samples: 256, source_size: 32, image_size: 32, workers: 0}
train: {batch_size: 8, optimizer: {lr: 0.01, momentum: 0.9}}
measure: {warmup_batches: 2, measured_batches: 10, repeats: 5, nvtx: off}
dist: {backend: gloo}
EOF
"${cluster[@]}" exec 0 "$tb" run --config "$out/profile.yaml" --set dist.backend=none -q --out "$out/one.json"
"${cluster[@]}" exec 1 "${launch[@]}" --rdzv-id run --no-python "$tb" run --config "$out/profile.yaml" -q \
  --out "$out/two.json" --baseline "$out/one.json" > "$out/run-node1.log" 2>&1 &
"${cluster[@]}" exec 0 "${launch[@]}" --rdzv-id run --no-python "$tb" run --config "$out/profile.yaml" \
  --out "$out/two.json" --baseline "$out/one.json" > "$out/run-node0.log" 2>&1
wait
one_step=$("$TRAINBENCH_PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['results']['stages_s']['batch']['median'])" "$out/one.json")
"$TRAINBENCH_PYTHON" scripts/alpha-beta.py check "$out/fit.txt" "$out/two.json" --compute "$one_step" | tee "$out/check.txt"
grep -E "^  (samples/s|rank |scaling)" "$out/run-node0.log" | tee -a "$out/check.txt"
