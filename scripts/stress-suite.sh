#!/usr/bin/env bash
# The CPU suite N times in a row under `ctest -j 2`, with K busy loops hogging the cores beside
# it, as CI's shared machines do: a test that fails once here is flaky. Prints each run's result,
# then every test that failed with the runs it failed in; each run's ctest log stays in --out.
#   usage: scripts/stress-suite.sh [--runs N] [--hog K] [--out DIR] [ctest arguments]
#   (defaults: 10 runs, K = the number of cores, reports/stress-suite)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=10 hog=$(nproc) out=reports/stress-suite
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --hog) hog=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) break ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ && "$hog" =~ ^[0-9]+$ ]] || { echo "usage: $0 [--runs N] [--hog K] [--out DIR]" >&2; exit 2; }
[ -f build/CTestTestfile.cmake ] || { echo "stress-suite.sh: no build/ (bash scripts/setup.sh first)" >&2; exit 2; }
mkdir -p "$out"
hogs=()
stop_hogs() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; }
trap stop_hogs EXIT
for _ in $(seq 1 "$hog"); do
  (while :; do :; done) &
  hogs+=($!)
done
echo "stress: $runs runs of ctest -LE gpu -j 2 beside $hog busy loop(s) on $(nproc) cores"
passed=0
for i in $(seq 1 "$runs"); do
  start=$(date +%s)
  ctest --test-dir build -LE gpu --output-on-failure -j 2 "$@" > "$out/run-$i.log" 2>&1
  rc=$?
  summary=$(grep -E "tests passed|tests failed" "$out/run-$i.log" | tail -1)
  echo "run $i: rc $rc, $(( $(date +%s) - start )) s, load $(cut -d' ' -f1 /proc/loadavg): $summary"
  [ $rc -eq 0 ] && passed=$((passed + 1))
done
echo "passed: $passed of $runs runs"
# ctest lists failures as "  <n> - <name> (Failed)" after "The following tests FAILED:".
grep -h -A1000 "The following tests FAILED" "$out"/run-*.log 2>/dev/null | grep -E "^\s+[0-9]+ - " |
  sed -E 's/^\s+[0-9]+ - //' | sort | uniq -c | sort -rn | sed 's/^/failed (runs): /'
[ "$passed" -eq "$runs" ]
