#!/usr/bin/env bash
# Profile one trainbench run under Nsight Systems with the reference article's flags, then print
# the NVTX range statistics.   usage: scripts/nsys-profile.sh PROFILE.yaml [trainbench options...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 PROFILE.yaml [--set key=value ...]" >&2; exit 2; }
profile=$1; shift
[ -f "$profile" ] || { echo "nsys-profile.sh: no such profile: $profile" >&2; exit 2; }
command -v nsys >/dev/null || { echo "nsys-profile.sh: nsys not found (Nsight Systems, part of the CUDA toolkit)" >&2; exit 2; }
mkdir -p reports/nsys
name=$(basename "$profile" .yaml)
out=reports/nsys/$name
# measure.kernel_families off: its profiler (CUPTI) and Nsight Systems' would both record kernels.
nsys profile -t cuda,nvtx,osrt --cuda-memory-usage=true -s cpu -f true -x true -o "$out" \
  ./build/trainbench run --config "$profile" --out "reports/nsys/$name.json" --set measure.kernel_families=false "$@"
nsys stats --report nvtx_sum --format table "$out.nsys-rep"
echo "timeline: $out.nsys-rep (open it in Nsight Systems; the NVTX domain is 'trainbench')"
