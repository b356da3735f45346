#!/usr/bin/env bash
# Faults across two hosts made of network namespaces (scripts/netns-cluster.sh), and the time
# each takes to end the job. Each run makes a fresh cluster, starts trainbench on both nodes the
# way docs/distributed.md shows (torchrun --nnodes 2, c10d rendezvous on node 0's address; srun's
# variables for never-joins), lets rank 0 finish its warmup, hits node 1 (rank 1) in the middle
# of the first measured window, and times the end.
#   usage: scripts/netns-faults.sh [--runs N] [--out DIR] [--prefix P] [--bound S] [--set key=value ...] SCENARIO...
#   SCENARIO: link-down   node 1's cable pulled (its bridge port set down)
#             kill        node 1's trainbench killed (SIGKILL)
#             stop        every process on node 1 stopped (SIGSTOP): the node hangs
#             never-joins node 1 never starts (srun's variables): trainbench's rendezvous times out
#             never-joins-torchrun  the same under torchrun: torchrun's own rendezvous times out
#             restart     as kill, under torchrun --max-restarts 1: the job runs again and ends
#             all         every one of them
# Prints a line per run, `scenario=S run=I seconds=T node0_rc=C node1_seconds=T node1_rc=C left=N`:
# seconds from the fault (the start, for never-joins) to the end of node 0's launcher, and its
# exit code; seconds until no trainbench runs on node 1, and its launcher's exit code 5 s later
# at most (-1: still running: stopped on purpose, or torchrun's agent cut off from its store);
# left: trainbench processes still running on either node then, other than the ones stopped on
# purpose. Each run's logs and reports stay in DIR/SCENARIO-I.
# Defaults: --runs 1, --out reports/netns-faults, --prefix tbf, --bound 120 (seconds a run may
# take after the fault before it counts as hung), the profile below with
# dist.heartbeat_timeout_s 3 and dist.timeout_s 20.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source scripts/env.sh
runs=1 out=reports/netns-faults prefix=tbf bound=120
sets=()
scenarios=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --bound) bound=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    all) scenarios+=(link-down kill stop never-joins never-joins-torchrun restart); shift ;;
    link-down|kill|stop|never-joins|never-joins-torchrun|restart) scenarios+=("$1"); shift ;;
    *) echo "netns-faults.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ ${#scenarios[@]} -gt 0 ] || { echo "usage: $0 [--runs N] [--out DIR] [--set k=v] SCENARIO... (see --help)" >&2; exit 2; }
[ -x build/trainbench ] || { echo "netns-faults.sh: build first (scripts/setup.sh)" >&2; exit 2; }
[ -x "$TRAINBENCH_PYTHON" ] || { echo "netns-faults.sh: no Python environment at $TRAINBENCH_VENV" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
tb=$(pwd)/build/trainbench
cluster=(scripts/netns-cluster.sh --prefix "$prefix")
trap '"${cluster[@]}" down' EXIT

# Tiny on purpose: two ranks and whatever else runs must fit a busy 2-core machine.
cat > "$out/profile.yaml" << 'EOF'
name: netns-fault
device: cpu
seed: 1
threads: 1
model: {arch: resnet18, num_classes: 10}
data: {source: synthetic, samples: 64, source_size: 8, image_size: 16, workers: 0}
train: {batch_size: 4, optimizer: {lr: 0.01, momentum: 0.9}}
measure: {warmup_batches: 1, measured_batches: 100000, repeats: 1, nvtx: off}
dist: {backend: gloo, timeout_s: 20, heartbeat_timeout_s: 3}
EOF

now() { date +%s.%N; }
# Runs a launcher in a subshell of its own, so that bash does not report it as "Killed" when
# `down` ends it; its exit code is the subshell's.
quietly() {
  "$@"
  return $?
}
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# trainbench processes running on a node (all of them: stopped ones included).
trainbench_on() { for p in $("${cluster[@]}" pids "$1" 2> /dev/null); do [ "$(cat "/proc/$p/comm" 2> /dev/null)" = trainbench ] && echo "$p"; done; }
# Waits up to $2 seconds for $1, a process of this shell; sets `code` to its exit code, or -1 if
# it still runs. (Not in a $(...): a subshell cannot wait for its parent's children.)
wait_bounded() {
  local waited=0
  while kill -0 "$1" 2> /dev/null && [ "$(ps -o stat= -p "$1" | cut -c1)" != Z ] && [ $waited -lt $(($2 * 20)) ]; do
    sleep 0.05
    waited=$((waited + 1))
  done
  if [ "$(ps -o stat= -p "$1" 2> /dev/null | cut -c1)" = Z ] || ! kill -0 "$1" 2> /dev/null; then
    wait "$1" 2> /dev/null
    code=$?
  else
    code=-1
  fi
}

one_run() {
  local scenario=$1 dir=$2 p0 p1="" addr0 args launch rc0 rc1 s0 s1 t0 started left
  rm -rf "$dir" && mkdir -p "$dir"
  "${cluster[@]}" up || return 1
  addr0=$("${cluster[@]}" addr 0)
  args=(run --config "$out/profile.yaml" --out "$dir/r{rank}.json" "${sets[@]}")
  launch=("$TRAINBENCH_PYTHON" -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d
          --rdzv-endpoint "$addr0:29400" --rdzv-id "$prefix" --max-restarts 0)
  case $scenario in
    restart) launch[-1]=1; args+=(--set measure.measured_batches=30) ;;
    never-joins-torchrun) launch+=(--rdzv-conf join_timeout=20) ;;
  esac
  if [ "$scenario" = never-joins ]; then
    # srun's variables across two nodes; rank 1's node never starts it.
    t0=$(now)
    "${cluster[@]}" exec 0 env SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 \
      SLURM_STEP_NUM_NODES=2 SLURM_STEP_NODELIST="$prefix-node[0-1]" "$tb" "${args[@]}" > "$dir/node0.log" 2>&1 &
    p0=$!
  elif [ "$scenario" = never-joins-torchrun ]; then
    t0=$(now)
    quietly "${cluster[@]}" exec 0 "${launch[@]}" --no-python "$tb" "${args[@]}" > "$dir/node0.log" 2>&1 &
    p0=$!
  else
    quietly "${cluster[@]}" exec 1 "${launch[@]}" --no-python "$tb" "${args[@]}" > "$dir/node1.log" 2>&1 &
    p1=$!
    quietly "${cluster[@]}" exec 0 "${launch[@]}" --no-python "$tb" "${args[@]}" > "$dir/node0.log" 2>&1 &
    p0=$!
    # Rank 0 logs the end of its warmup as the first measured window starts.
    started=$(now)
    until grep -q "warmup: .* done" "$dir/node0.log" 2> /dev/null; do
      if ! kill -0 "$p0" 2> /dev/null || [ "$(since "$started" | cut -d. -f1)" -ge 300 ]; then
        echo "netns-faults.sh: $scenario: rank 0 never finished its warmup (see $dir/node0.log)" >&2
        "${cluster[@]}" down
        return 1
      fi
      sleep 0.1
    done
    # shellcheck disable=SC2046  # one word per process id
    case $scenario in
      link-down) "${cluster[@]}" link 1 down ;;
      kill | restart) kill -KILL $(trainbench_on 1) ;;
      stop) kill -STOP $("${cluster[@]}" pids 1) ;;
    esac
    t0=$(now)
  fi
  wait_bounded "$p0" "$bound"
  rc0=$code
  s0=$(since "$t0")
  rc1=none s1=none
  if [ -n "$p1" ] && [ "$scenario" != stop ]; then
    # Node 1's own trainbench must end too; its launcher gets a while longer (see docs/distributed.md:
    # torchrun's agent on a node cut off from the store waits on the kernel's TCP timeout).
    until [ -z "$(trainbench_on 1)" ] || [ "$(since "$t0" | cut -d. -f1)" -ge "$bound" ]; do sleep 0.1; done
    s1=$(since "$t0")
    wait_bounded "$p1" 5
    rc1=$code
  elif [ -n "$p1" ]; then
    rc1=-1
  fi
  left=$( (trainbench_on 0; [ "$scenario" = stop ] || trainbench_on 1) | wc -l)
  "${cluster[@]}" down
  # Reaped quietly: bash would report the launcher that `down` killed.
  [ -n "$p1" ] && { wait "$p1"; } 2> /dev/null
  echo "scenario=$scenario run=$3 seconds=$s0 node0_rc=$rc0 node1_seconds=$s1 node1_rc=$rc1 left=$left"
}

status=0
for scenario in "${scenarios[@]}"; do
  for i in $(seq 1 "$runs"); do
    one_run "$scenario" "$out/$scenario-$i" "$i" || status=1
  done
done
exit $status
