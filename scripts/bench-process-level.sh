#!/usr/bin/env bash
# Does compare keep its promise across processes? Runs one profile many times, each run its own
# process as CI starts it, and compares every pair of runs of the same binary and profile (so
# every FASTER or SLOWER is a false alarm):
#   single: --runs one-process runs one after another, compared at the window level (compare
#           before processes were its unit: the issue's measurement);
#   recipe: --runs sides of --processes one-process runs each, the sides interleaved process by
#           process (side 1, side 2, ..., side 1, ...) as the README's CI recipe interleaves main's
#           and the pull request's binaries; every pair of sides compared at the process level
#           (and, for contrast, at the window level);
#   busy:   --busy-runs pairs of sides, an unloaded one and one beside a busy loop pinned to CPU 0,
#           interleaved: a real slowdown, which must still read SLOWER.
#   scripts/bench-process-level.sh [--runs 10] [--processes 5] [--repeats 8] [--busy-runs 3]
#       [--profile configs/cpu/01-batch-32.yaml] [--out reports/process-level]
# Prints a Markdown summary (the variance split, the verdict counts, the startup cost); the
# reports stay under --out.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

runs=10 processes=5 repeats=8 busy_runs=3
profile=configs/cpu/01-batch-32.yaml out=reports/process-level
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --processes) processes=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --busy-runs) busy_runs=$2; shift 2 ;;
    --profile) profile=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench-process-level.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
tb=./build/trainbench
[ -x "$tb" ] || { echo "bench-process-level.sh: build trainbench first (bash scripts/setup.sh)" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out/single"

run() { "$tb" run -q -c "$profile" --set measure.repeats="$repeats" "$@" > /dev/null 2>&1; }
for i in $(seq 1 "$runs"); do
  echo "single $i/$runs" >&2
  run --out "$out/single/r$i.json"
done
for p in $(seq 1 "$processes"); do
  echo "recipe: process $p/$processes of $runs sides" >&2
  for i in $(seq 1 "$runs"); do run --out "$out/recipe/side$i/p$p.json"; done
done

busy_pid=""
stop_busy() { [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; busy_pid=""; }
trap stop_busy EXIT
for b in $(seq 1 "$busy_runs"); do
  for p in $(seq 1 "$processes"); do
    echo "busy pair $b/$busy_runs: process $p/$processes, unloaded then beside a busy loop on CPU 0" >&2
    run --out "$out/busy/pair$b/quiet/p$p.json"
    taskset -c 0 sh -c 'while :; do :; done' &
    busy_pid=$!
    run --out "$out/busy/pair$b/busy/p$p.json"
    stop_busy
  done
done

"$TRAINBENCH_PYTHON" - "$tb" "$out" "$runs" "$busy_runs" "$processes" "$repeats" "$profile" <<'PY'
import itertools, json, subprocess, sys
tb, out, runs, busy_runs, processes, repeats, profile = sys.argv[1:8]
runs, busy_runs = int(runs), int(busy_runs)

def verdicts(pairs, level):
    counts = {"FASTER": 0, "SLOWER": 0, "SAME": 0, "AMBIGUOUS": 0}
    for base, cand in pairs:
        r = subprocess.run([tb, "compare", base, cand, "--format", "json", "--level", level],
                           capture_output=True, text=True)
        if r.returncode not in (0, 1):
            sys.exit(f"compare {base} {cand} failed ({r.returncode}): {r.stderr}")
        j = json.loads(r.stdout[r.stdout.index("{"):])
        counts[j["rows"][0]["verdict"]] += 1
    return counts

def split(by_process):
    """One-way random-effects ANOVA: (within cv, between cv, icc)."""
    groups = [g for g in by_process if g]
    n = sum(len(g) for g in groups); k = len(groups)
    grand = sum(sum(g) for g in groups) / n
    means = [sum(g) / len(g) for g in groups]
    msw = sum((v - m) ** 2 for g, m in zip(groups, means) for v in g) / (n - k)
    msb = sum(len(g) * (m - grand) ** 2 for g, m in zip(groups, means)) / (k - 1)
    n0 = (n - sum(len(g) ** 2 for g in groups) / n) / (k - 1)
    between = max(0.0, (msb - msw) / n0)
    return msw ** 0.5 / grand, between ** 0.5 / grand, between / (between + msw)

def windows(path):
    j = json.load(open(path))
    by = {}
    for w in j["results"]["repeats"]:
        by.setdefault(w.get("process", 0), []).append(w["samples_per_s"])
    return j, [by[k] for k in sorted(by)]

single = [f"{out}/single/r{i}.json" for i in range(1, runs + 1)]
sides = [f"{out}/recipe/side{i}" for i in range(1, runs + 1)]
single_groups = [windows(f)[1][0] for f in single]
recipe_groups = [windows(f"{side}/p{p}.json")[1][0] for side in sides for p in range(1, int(processes) + 1)]
costs = sorted(json.load(open(f"{side}/p{p}.json"))["results"]["processes"]["per_process"][0]["before_first_window_s"]
               for side in sides for p in range(1, int(processes) + 1))
medians = sorted(sum(g) / len(g) for g in single_groups)

def row(name, c, pairs):
    alarms = c["FASTER"] + c["SLOWER"]
    return (f"| {name} | {pairs} | {c['SLOWER']} | {c['FASTER']} | {c['SAME']} | {c['AMBIGUOUS']} | "
            f"{100 * alarms / pairs:.0f}% |")

print(f"Profile `{profile}`, {repeats} windows per process. {runs} one-process runs one after another; "
      f"then {runs} sides of {processes} one-process runs, interleaved process by process; then {busy_runs} "
      f"pairs of sides, one beside a busy loop on CPU 0, interleaved.\n")
w, b, icc = split(single_groups)
print(f"- {runs} one-process runs: medians {medians[0]:.1f} to {medians[-1]:.1f} samples/s; "
      f"within-process cv {w:.1%}, between-process cv {b:.1%}, ICC {icc:.2f}")
w, b, icc = split(recipe_groups)
print(f"- the {len(recipe_groups)} processes of the recipe's sides: within-process cv {w:.1%}, "
      f"between-process cv {b:.1%}, ICC {icc:.2f}")
print(f"- a process before its first window: median {costs[len(costs) // 2]:.2f} s "
      f"(range {costs[0]:.2f} to {costs[-1]:.2f} s)\n")
print("| pairs of unchanged runs | pairs | SLOWER | FASTER | SAME | AMBIGUOUS | false alarms |")
print("|---|---:|---:|---:|---:|---:|---:|")
pairs = list(itertools.combinations(single, 2))
print(row("one process each, window level (compare before)", verdicts(pairs, "window"), len(pairs)), flush=True)
pairs = list(itertools.combinations(sides, 2))
print(row(f"{processes} processes each, window level", verdicts(pairs, "window"), len(pairs)), flush=True)
print(row(f"{processes} processes each, process level (the recipe)", verdicts(pairs, "process"), len(pairs)),
      flush=True)
pairs = [(f"{out}/busy/pair{b}/quiet", f"{out}/busy/pair{b}/busy") for b in range(1, busy_runs + 1)]
c = verdicts(pairs, "process")
print(f"\nA real slowdown (a busy loop on CPU 0 beside the candidate), {processes} processes a side: "
      f"{c['SLOWER']} of {len(pairs)} pairs SLOWER, {c['AMBIGUOUS']} AMBIGUOUS, {c['SAME']} SAME, "
      f"{c['FASTER']} FASTER.")
for b in range(1, busy_runs + 1):
    q = [windows(f"{out}/busy/pair{b}/quiet/p{p}.json")[1][0] for p in range(1, int(processes) + 1)]
    x = [windows(f"{out}/busy/pair{b}/busy/p{p}.json")[1][0] for p in range(1, int(processes) + 1)]
    mq = sorted(sorted(g)[len(g) // 2] for g in q)[len(q) // 2]
    mx = sorted(sorted(g)[len(g) // 2] for g in x)[len(x) // 2]
    print(f"- pair {b}: medians of process medians {mq:.1f} unloaded, {mx:.1f} beside the loop "
          f"({100 * (mx / mq - 1):+.0f}%)")
PY
