#!/usr/bin/env bash
# The GPU kit's tests phase (scripts/gpu-check.sh runs it; docs/gpu-check.md): every [gpu] test
# case of a Catch2 binary within a time budget. Catch2 has no per-test time limit, and in one
# process a hung case stops every case after it; but a process start (LibTorch's CUDA libraries, a
# CUDA context) costs seconds, and most cases take a few. So the cases run in two group processes
# first (the default cap's, then the budget file's), watched so that a hang costs its cap, and
# what did not pass there runs alone, each under its own cap.
#   usage: scripts/gpu-tests.sh --tests BIN --out DIR --seconds S [--budget-file F] [--tests-from F]
#                               [--rehearse] [--python PY]
#     --seconds S     start nothing that cannot end within S seconds from now
#     --budget-file F "SECONDS<TAB>exact test case name" lines: the long cases and their caps
#                     (default scripts/gpu-tests-budget.txt); every other case gets 30 s
#     --tests-from F  only the cases named in F, one a line (a first call's gpu-tests-left.txt)
#     --rehearse      on a machine without a GPU: every case must stop at its require_cuda()
#     --python PY     the Python that reads the XML reporter's files (default python3)
# Out, in DIR: gpu-tests.tsv (status, seconds, cap, name), gpu-tests.txt (each case's output),
# gpu-tests-left.txt (the cases not finished: --tests-from of a second call), gpu-tests-group.xml
# and gpu-tests-group-2.xml with their .txt (the group processes).
# Exit 0 when every case passed (or was rehearsed), 1 when one failed, timed out or did not run, 2
# on bad usage or a binary that lists no [gpu] case. SIGINT or SIGTERM: no further case starts.
set -uo pipefail
TESTS="" out="" seconds="" budget_file=$(dirname "$0")/gpu-tests-budget.txt tests_from="" rehearse=0 PY=python3
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) TESTS=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --budget-file) budget_file=$2; shift 2 ;;
    --tests-from) tests_from=$2; shift 2 ;;
    --rehearse) rehearse=1; shift ;;
    --python) PY=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "gpu-tests.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$TESTS" ] || { echo "gpu-tests.sh: --tests: no executable '$TESTS'" >&2; exit 2; }
[ -d "$out" ] || { echo "gpu-tests.sh: --out: no folder '$out'" >&2; exit 2; }
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "gpu-tests.sh: --seconds takes whole seconds, not '$seconds'" >&2; exit 2; }
[ -f "$budget_file" ] || { echo "gpu-tests.sh: --budget-file: no file '$budget_file'" >&2; exit 2; }
[ -z "$tests_from" ] || [ -f "$tests_from" ] || { echo "gpu-tests.sh: --tests-from: no file '$tests_from'" >&2; exit 2; }
deadline=$(( $(date +%s) + seconds ))
# Seconds left of the budget, never below 0.
phase_left() { local l=$(( deadline - $(date +%s) )); [ "$l" -gt 0 ] && echo "$l" || echo 0; }
stop=0
trap 'stop=1; echo "gpu-tests.sh: signal: no further case starts"' INT TERM

# The group process's watchdog: Catch2 runs its cases in the list's order and the XML reporter
# writes each case's end as it comes, so the case running is the one after the last that ended.
# One that runs past its cap (the budget file's, else 30 s) and 15 s more (the first case also
# starts CUDA) is taken to hang: the group gets SIGINT, and the cases after it run alone, so a
# hang costs its cap, not the phase. Args: the group's timeout pid, the XML file, the cases in
# Catch2's order.
watch_group() {
  local pid=$1 xml=$2 ended last=-1 since name cap; shift 2
  local cases=("$@")
  since=$(date +%s)
  while kill -0 "$pid" 2>/dev/null; do
    sleep 2
    ended=$(grep -c '</TestCase>' "$xml" 2>/dev/null); ended=${ended:-0}
    if [ "$ended" != "$last" ]; then last=$ended; since=$(date +%s); fi
    [ "$ended" -lt ${#cases[@]} ] || continue
    name=${cases[$ended]}; cap=${cap_of[$name]:-30}
    if [ $(( $(date +%s) - since )) -gt $((cap + 15)) ]; then
      echo "the group's process: '$name' ran past its cap of $cap s: stopped; the cases after it run alone"
      printf '%s\n' "$name" > "$xml.hung"
      kill -INT "$pid" 2>/dev/null
      return
    fi
  done
}

# One group process of [gpu] cases (pass 1 of the tests phase): FILE.xml and FILE.txt in $out,
# the results into group_secs (passed) and group_fail (failed). Args: FILE, the cases in Catch2's
# order.
run_group() {
  local file=$1 limit=30 gcap gpid wpid rc s0 n result secs name; shift
  [ $# -gt 0 ] || return 0
  for n in "$@"; do
    if [ -n "${cap_of[$n]:-}" ]; then limit=$((limit + ${cap_of[$n]})); else limit=$((limit + 3)); fi
  done
  gcap=$(( $(phase_left) - 20 )); [ "$gcap" -gt "$limit" ] && gcap=$limit
  [ $rehearse = 1 ] && gcap=$((3 * $# + 60))
  [ $stop = 0 ] && [ "$gcap" -ge 30 ] || return 0
  printf '%s\n' "$@" | sed 's/\\/\\\\/g; s/,/\\,/g' > "$out/.group-names"
  s0=$(date +%s)
  : > "$out/$file.xml"
  timeout -s INT -k 5 "$gcap" "$TESTS" -f "$out/.group-names" -w NoTests --durations yes -r xml \
    -o "$out/$file.xml" > "$out/$file.txt" 2>&1 &
  gpid=$!
  wpid=""
  if [ $rehearse = 0 ]; then watch_group "$gpid" "$out/$file.xml" "$@" & wpid=$!; fi
  wait "$gpid"
  rc=$?
  # A signal to the script ends the wait, not the group: stop it before anything reads its files.
  while kill -0 "$gpid" 2>/dev/null; do kill -INT "$gpid" 2>/dev/null; wait "$gpid"; rc=$?; done
  [ -z "$wpid" ] || { kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null; }
  rm -f "$out/.group-names"
  if [ -s "$out/$file.xml.hung" ]; then
    group_hung[$(cat "$out/$file.xml.hung")]=1
    rm -f "$out/$file.xml.hung"
  fi
  while IFS=$'\t' read -r result secs name; do
    [ $rehearse = 1 ] && continue
    if [ "$result" = pass ]; then group_secs[$name]=$secs; else group_fail[$name]=$secs; fi
  done < <($PY - "$out/$file.xml" <<'PYEOF'
import html, re, sys
try:
    text = open(sys.argv[1], errors="replace").read()
except OSError:
    sys.exit(0)
# A case is done when its element closed with its result. Catch2 closes the running case on SIGINT
# too (the cap, the watchdog, a signal to the kit), as a failure that names the signal: that case
# did not finish, it did not fail.
for m in re.finditer(r'<TestCase name="([^"]*)"((?:(?!<TestCase ).)*?)</TestCase>', text, re.S):
    r = re.search(r'<OverallResult success="(true|false)"(?: durationInSeconds="([^"]*)")?', m.group(2))
    if r and not re.search(r'<FatalErrorCondition[^>]*>\s*SIGINT\b', m.group(2)):
        result = "pass" if r.group(1) == "true" else "fail"
        print(f"{result}\t{float(r.group(2) or 0):.1f}\t{html.unescape(m.group(1))}")
PYEOF
)
  # The watchdog takes the case after the last that ended to be the one running: Catch2 must run
  # them in the list's order. A rehearsal, whose cases all end at once, checks that it does.
  if [ $rehearse = 1 ]; then
    local ran
    ran=$($PY -c 'import html, re, sys
print("\n".join(html.unescape(n) for n in re.findall(r"<TestCase name=\"([^\"]*)\"", open(sys.argv[1]).read())))' \
      "$out/$file.xml")
    if [ "$ran" = "$(printf '%s\n' "$@")" ]; then echo "$file: Catch2 ran the $# cases in the list's order"
    else echo "$file: broken: Catch2 ran the cases in another order than the list's, which the watchdog assumes"; tests_rc=1; fi
  fi
  echo "$file: $# cases in one process: exit $rc after $(( $(date +%s) - s0 )) s (cap $gcap s);" \
    "${#group_secs[@]} passed and ${#group_fail[@]} failed in the groups so far; the rest run alone"
}

tests_rc=0
# Each [gpu] test case in a process of its own under its own time limit (Catch2 has none): a
# hung case costs its cap, not the phase. The cases of scripts/gpu-tests-budget.txt get the cap
# it names and run last, the longest last; every other case gets 30 s and runs first, in Catch2's
# order. Out: gpu-tests.tsv (status, seconds, cap, name), gpu-tests.txt (every case's output) and
# gpu-tests-left.txt (the cases not finished: --tests-from of a second call).
# Hidden cases ([.], benchmarks) match a tag they name too: left out, as ctest leaves them.
mapfile -t names < <($TESTS "[gpu]~[.]" --list-test-names-only 2>/dev/null | sed '/^$/d')
[ ${#names[@]} -gt 0 ] || { echo "gpu-tests.sh: $TESTS lists no [gpu] test case"; exit 2; }
if [ -n "$tests_from" ]; then
  mapfile -t wanted < <(sed '/^$/d' "$tests_from")
  kept=()
  for n in "${names[@]}"; do
    for w in "${wanted[@]}"; do [ "$n" = "$w" ] && kept+=("$n"); done
  done
  echo "--tests-from: ${#kept[@]} of the ${#names[@]} cases"
  names=("${kept[@]}")
fi
declare -A cap_of=()
while IFS=$'\t' read -r secs name; do
  [[ "$secs" =~ ^[0-9]+$ ]] && cap_of[$name]=$secs
done < <(grep -v '^#' "$budget_file")
# Order: the cap (30 for unlisted cases), then Catch2's order.
mapfile -t order < <(for i in "${!names[@]}"; do
  printf '%s\t%s\t%s\n' "${cap_of[${names[$i]}]:-30}" "$i" "${names[$i]}"; done | sort -t$'\t' -k1,1n -k2,2n)
printf 'status\tseconds\tcap_s\tname\n' > "$out/gpu-tests.tsv"
: > "$out/gpu-tests.txt"
: > "$out/gpu-tests-left.txt"
# Pass 1: the cases in two processes, those of the default cap first, then the budget file's.
# Each process pays seconds to load LibTorch's CUDA libraries and make a CUDA context before its
# case starts, some forty times over where most cases take a few seconds; Catch2's XML reporter
# records each case's result as it ends. A case that passed there is done. One that failed, or
# had not ended when its process did (a crash; a hang, stopped by watch_group), runs again alone
# below, where its own result counts; where the time left is too short for that, a failure in a
# group stands (and the case is left for a second call). A group's cap is the phase's time left,
# at most its cases' share: 3 s for a case of the default cap, a listed case's own cap, plus 30.
# A rehearsal runs the groups too (every case fails there) and takes nothing from them.
declare -A group_secs=() group_fail=() group_hung=()
short_cases=() long_cases=()
for n in "${names[@]}"; do  # Catch2's order, which a group process keeps
  if [ -n "${cap_of[$n]:-}" ]; then long_cases+=("$n"); else short_cases+=("$n"); fi
done
run_group gpu-tests-group "${short_cases[@]}"
run_group gpu-tests-group-2 "${long_cases[@]}"
for row in "${order[@]}"; do
  IFS=$'\t' read -r cap _ name <<< "$row"
  if [ -n "${group_secs[$name]:-}" ]; then
    printf 'pass\t%s\t%s\t%s\n' "${group_secs[$name]}" "$cap" "$name" >> "$out/gpu-tests.tsv"
    echo "== $name: pass in ${group_secs[$name]} s, in a group's process (gpu-tests-group*.xml)" >> "$out/gpu-tests.txt"
    printf '%-9s %6s s  %s (in the group)\n' pass "${group_secs[$name]}" "$name"
    continue
  fi
  # A case the watchdog stopped would likely hang alone too: its cap once is enough this call.
  if [ -n "${group_hung[$name]:-}" ]; then
    printf 'timeout\t%s\t%s\t%s\n' "$((cap + 15))" "$cap" "$name" >> "$out/gpu-tests.tsv"
    echo "== $name: timeout in a group's process, past its cap of $cap s (its output: gpu-tests-group*.txt); not run again in this call" >> "$out/gpu-tests.txt"
    printf '%-9s %6s s  %s (in the group)\n' timeout "$((cap + 15))" "$name"
    echo "$name" >> "$out/gpu-tests-left.txt"
    tests_rc=1
    continue
  fi
  # Catch2's test spec: a comma separates two specs, a backslash escapes.
  spec=${name//\\/\\\\}; spec=${spec//,/\\,}
  l=$(( $(phase_left) - 5 ))
  # A case of gpu-tests-budget.txt starts only with its whole cap left (a shortened cap would
  # likely cost the time and still time out): it is left for the second call. Every other case
  # (30 s) starts with 10 s left; most take a few seconds.
  need=10; [ -n "${cap_of[$name]:-}" ] && need=$cap
  if [ $stop = 1 ] || { [ $rehearse = 0 ] && [ "$l" -lt "$need" ]; }; then
    if [ -n "${group_fail[$name]:-}" ]; then
      printf 'fail\t%s\t%s\t%s\n' "${group_fail[$name]}" "$cap" "$name" >> "$out/gpu-tests.tsv"
      echo "== $name: fail in ${group_fail[$name]} s, in a group's process (its output: gpu-tests-group*.xml); not run alone ($([ $stop = 1 ] && echo "stopped by a signal" || echo "no time left"))" >> "$out/gpu-tests.txt"
      printf '%-9s %6s s  %s (in the group)\n' fail "${group_fail[$name]}" "$name"
      tests_rc=1
    else
      printf 'not-run\t0\t%s\t%s\n' "$cap" "$name" >> "$out/gpu-tests.tsv"
      tests_rc=1
    fi
    echo "$name" >> "$out/gpu-tests-left.txt"
    continue
  fi
  [ $rehearse = 0 ] && [ "$cap" -gt "$l" ] && cap=$l
  s0=$(date +%s%N)
  timeout -s INT -k 5 "$cap" "$TESTS" "$spec" -w NoTests --reporter compact > "$out/.test-out" 2>&1
  rc=$?
  ms=$(( ($(date +%s%N) - s0) / 1000000 )); secs=$((ms / 1000)).$(( (ms % 1000) / 100 ))
  if [ $rehearse = 1 ]; then
    # No GPU: each case must have been found and stopped at its require_cuda().
    grep -q "no CUDA device" "$out/.test-out" && status=rehearsed || status=broken
  elif [ $rc = 0 ]; then status=pass
  elif [ $rc = 124 ] || [ $rc = 137 ]; then status=timeout
  else status=fail; fi
  printf '%s\t%s\t%s\t%s\n' "$status" "$secs" "$cap" "$name" >> "$out/gpu-tests.tsv"
  { echo "== $name: $status in $secs s (cap $cap s, exit $rc)"; cat "$out/.test-out"; echo; } >> "$out/gpu-tests.txt"
  printf '%-9s %6s s  %s\n' "$status" "$secs" "$name"
  case $status in pass|rehearsed) ;; timeout) echo "$name" >> "$out/gpu-tests-left.txt"; tests_rc=1 ;; *) tests_rc=1 ;; esac
done
rm -f "$out/.test-out"
summary=$(awk -F'\t' 'NR > 1 {n[$1]++} END {for (s in n) printf "%s %d, ", s, n[s]}' "$out/gpu-tests.tsv")
echo "[gpu] test cases: ${summary%, } (gpu-tests.tsv)"
if [ -s "$out/gpu-tests-left.txt" ]; then
  echo "not finished (a second call: --tests-from gpu-tests-left.txt):"; sed 's/^/  /' "$out/gpu-tests-left.txt"
fi

exit $tests_rc
