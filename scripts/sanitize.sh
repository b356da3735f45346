#!/usr/bin/env bash
# The CPU suite under sanitizers, each kind in its own build folder:
#   scripts/sanitize.sh asan   AddressSanitizer + UndefinedBehaviorSanitizer, whole CPU suite (build-asan/)
#   scripts/sanitize.sh tsan   ThreadSanitizer, the tests of threads: loader, image folder, trace, distributed (build-tsan/)
# Extra arguments go to ctest (asan) or to the Catch2 test binary (tsan), e.g. -R loader.
# Too slow for CI's 25 minutes on 2 cores (see docs/testing.md); run it before merging changes
# to threads, buffers or file readers. Exit 0 only when the tests pass and no process reported.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

kind=${1:-}
[ $# -gt 0 ] && shift
case "$kind" in
  asan) dir=build-asan; flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;;
  tsan) dir=build-tsan; flags="-fsanitize=thread" ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [test arguments]" >&2; exit 2 ;;
esac

prefix=$("$TRAINBENCH_PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
if [ ! -f "$dir/build.ninja" ]; then
  echo "== configure $dir ($flags)"
  mkdir -p "$dir"
  # -O1 keeps stacks readable and the run bearable; the precompiled header is built with the same
  # flags. GCC 12's maybe-uninitialized analysis misfires on instrumented code (in libstdc++'s
  # <regex>, which Catch2 includes), so that one warning is off here; the Release build keeps it.
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -fno-omit-frame-pointer -Wno-maybe-uninitialized $flags" \
        -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" \
        -DTRAINBENCH_TSAN_TEST=OFF -DCUDAToolkit_ROOT="${CUDAToolkit_ROOT:-/usr/local/cuda}" > "$dir/configure.log" 2>&1 ||
    { cat "$dir/configure.log"; exit 1; }
fi
echo "== build $dir"
cmake --build "$dir" -j "$(nproc)"

# Every process (the tests start many trainbench processes, some with output sent to /dev/null)
# writes its report to a file here, so none is lost; the script fails if any appeared.
reports="$PWD/$dir/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
supp="$PWD/scripts/sanitize"
status=0
if [ "$kind" = asan ]; then
  # protect_shadow_gap=0: the CUDA runtime maps memory where ASan's shadow gap would be (GPU hosts).
  # Leaks: LibTorch's operator and kernel registries are reachable at exit and not reported;
  # lsan.supp lists the few allocations of its own it never frees (see the file).
  # allocator_may_return_null=1: a failed allocation is an exception, as without ASan (the tests
  # of runs that fail to allocate rely on it).
  export ASAN_OPTIONS="protect_shadow_gap=0:detect_leaks=1:allocator_may_return_null=1:log_path=$reports/asan:exitcode=99"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
  # Instrumented runs are several times slower: ctest's 600 s default would cut the longest tests.
  ctest --test-dir "$dir" -LE gpu --output-on-failure -j 2 --timeout 3600 "$@" || status=$?
else
  # LibTorch's OpenMP runtime is not instrumented: its barriers are invisible to TSan, so
  # intra-op threads would show as false races. One intra-op thread leaves our own threads
  # (loader workers, Gloo's) as what is checked. tsan.supp explains each entry.
  export OMP_NUM_THREADS=1
  export TSAN_OPTIONS="log_path=$reports/tsan:second_deadlock_stack=1:suppressions=$supp/tsan.supp:exitcode=66"
  # The files' own tests, by Catch2's file-name tags: a new test there is covered without a list here.
  # The loader (worker threads), the image-folder batches (decoding workers), the file ring
  # (producer and consumer threads), the trace recorder (lanes written from several threads) and
  # the distributed runs (Gloo's threads, several ranks).
  "$dir/tests/trainbench_tests" -# "[#test_loader],[#test_imagefolder],[#test_byte_ring],[#test_trace],[#test_dist],[#test_launch]" "$@" ||
    status=$?
fi

found=$(find "$reports" -type f | wc -l)
if [ "$found" -gt 0 ]; then
  echo "== $found sanitizer report file(s) in $reports:"
  for f in "$reports"/*; do
    echo "--- $f"
    head -n 60 "$f"
  done
  [ "$status" -ne 0 ] || status=1
fi
[ "$status" -eq 0 ] && echo "== $kind: clean"
exit "$status"
