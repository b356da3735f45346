#!/usr/bin/env bash
# Does compare keep its promise across processes? Runs one profile many times, each run its own
# invocation as CI would make it, and compares every pair of runs of the same binary and
# profile (so every FASTER or SLOWER is a false alarm):
#   single: --runs one-process runs, compared at the window level (what compare did before);
#   multi:  --runs runs of --processes fresh processes each (the CI recipe), at the process level
#           (and, for contrast, at the window level);
#   busy:   --busy-runs runs of the recipe beside a busy loop pinned to CPU 0, against every
#           multi run: a real slowdown, which must still read SLOWER.
# The single and multi runs are interleaved, so a drift of the machine falls on both.
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
mkdir -p "$out/single" "$out/multi" "$out/busy"

run() { "$tb" run -q -c "$profile" --set measure.repeats="$repeats" "$@" > /dev/null; }
for i in $(seq 1 "$runs"); do
  echo "run $i/$runs: one process, then $processes" >&2
  run --out "$out/single/r$i.json"
  run --processes "$processes" --out "$out/multi/r$i.json"
done

busy_pid=""
stop_busy() { [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null; busy_pid=""; }
trap stop_busy EXIT
for i in $(seq 1 "$busy_runs"); do
  echo "busy run $i/$busy_runs: $processes processes beside a busy loop on CPU 0" >&2
  taskset -c 0 sh -c 'while :; do :; done' &
  busy_pid=$!
  run --processes "$processes" --out "$out/busy/r$i.json"
  stop_busy
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
multi = [f"{out}/multi/r{i}.json" for i in range(1, runs + 1)]
busy = [f"{out}/busy/r{i}.json" for i in range(1, busy_runs + 1)]
single_groups = [windows(f)[1][0] for f in single]
multi_groups = [g for f in multi for g in windows(f)[1]]
costs = [p["before_first_window_s"] for f in multi for p in json.load(open(f))["results"]["processes"]["per_process"]]
medians = sorted(sum(g) / len(g) for g in single_groups)

def row(name, c, pairs):
    alarms = c["FASTER"] + c["SLOWER"]
    return (f"| {name} | {pairs} | {c['SLOWER']} | {c['FASTER']} | {c['SAME']} | {c['AMBIGUOUS']} | "
            f"{100 * alarms / pairs:.0f}% |")

print(f"Profile `{profile}`, {repeats} windows per process; {runs} one-process runs and {runs} runs of "
      f"{processes} processes, interleaved; {busy_runs} runs of {processes} processes beside a busy loop on CPU 0.\n")
w, b, icc = split(single_groups)
print(f"- {runs} one-process runs: per-process medians {medians[0]:.1f} to {medians[-1]:.1f} samples/s; "
      f"within-process cv {w:.1%}, between-process cv {b:.1%}, ICC {icc:.2f}")
w, b, icc = split(multi_groups)
print(f"- the {len(multi_groups)} processes of the {runs} recipe runs: within-process cv {w:.1%}, "
      f"between-process cv {b:.1%}, ICC {icc:.2f}")
costs.sort()
print(f"- a process before its first window: median {costs[len(costs) // 2]:.2f} s "
      f"(range {costs[0]:.2f} to {costs[-1]:.2f} s)\n")
print("| pairs of unchanged runs | pairs | SLOWER | FASTER | SAME | AMBIGUOUS | false alarms |")
print("|---|---:|---:|---:|---:|---:|---:|")
pairs = list(itertools.combinations(single, 2))
print(row("one process each, window level (compare before)", verdicts(pairs, "window"), len(pairs)), flush=True)
pairs = list(itertools.combinations(multi, 2))
print(row(f"{processes} processes each, window level", verdicts(pairs, "window"), len(pairs)), flush=True)
print(row(f"{processes} processes each, process level (the recipe)", verdicts(pairs, "process"), len(pairs)),
      flush=True)
pairs = [(m, x) for x in busy for m in multi]
c = verdicts(pairs, "process")
print(f"\nA real slowdown (busy loop on CPU 0), recipe against recipe: {c['SLOWER']} of {len(pairs)} pairs SLOWER, "
      f"{c['AMBIGUOUS']} AMBIGUOUS, {c['SAME']} SAME, {c['FASTER']} FASTER.")
busy_median = sorted(json.load(open(f))["results"]["processes"]["median_of_medians"] for f in busy)
multi_median = sorted(json.load(open(f))["results"]["processes"]["median_of_medians"] for f in multi)
print(f"Medians of process medians: unloaded {multi_median[len(multi_median) // 2]:.1f}, beside the busy loop "
      f"{busy_median[len(busy_median) // 2]:.1f} samples/s.")
PY
