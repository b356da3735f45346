#pragma once
// The fused crop: crop, antialiased bilinear resize, flip, ToTensor + Normalize and the model's
// layout (NCHW or NHWC) and dtype (float32, float16, bfloat16) in one pass per image, straight
// into the batch. The CUDA kernel is cuda/fused_crop.cu; this is its CPU side: the plan from the
// host sampler's, the checks, a reference that mirrors the host path (crop_resampler) and an
// emulation that runs the kernel's own arithmetic (fused_crop_math.hpp) on the host.
#include <string>

#include "trainbench/data/crop.hpp"
#include "trainbench/data/fused_crop_math.hpp"

namespace trainbench {

// The host sampler's plan (in the file's coordinates, or for a worker's DCT-scaled decode in the
// scaled image's: scaled_plan) for the pixels of a width x height region whose top left is column
// x0, row y0 of the image (a decoded region of interest), or of the whole image (the defaults). The plan's source range [lo, hi) is clipped to the region, which
// changes no output as long as the region holds every pixel a tap reads with a non-zero weight:
// the plan's [lo, hi) rectangle does, and so does the region crop_resampler::prepare returns.
fused_crop_plan fused_plan(const resize_plan& p, int x0 = 0, int y0 = 0, int width = -1, int height = -1);

// The region of a width x height file a device decode asks for: the plan's [x.lo, x.hi) x
// [y.lo, y.hi) (every pixel a tap reads), widened to whole 16 x 16 blocks (a 4:2:0 MCU) plus one
// more block on each side, within the file: a region decoder that starts on the block grid, and
// upsamples chroma from neighbours inside its region, then gives the plan's pixels as a whole
// decode does.
struct plan_region {
  int x0 = 0, y0 = 0, width = 0, height = 0;
};
plan_region region_of(const resize_plan& p, int width, int height);

fused_crop_normalizer fused_normalizer(const normalizer& n);

// Bytes per element of `dtype` (4 or 2).
int crop_dtype_bytes(crop_dtype dtype);
const char* crop_dtype_name(crop_dtype dtype);
const char* crop_layout_name(crop_layout layout);

// Empty when the job can be cropped into an S x S slot (pixels, pitch, channels 1 or 3, each
// axis's [lo, hi) inside the image, the kept range inside out_total); else what is wrong.
std::string fused_crop_problem(const fused_crop_job& job, int size);
// Empty when the output can take `n` slots; else what is wrong.
std::string fused_crop_output_problem(const fused_crop_output& out, int n);

// The reference: the host path's arithmetic (make_span_taps, then crop_resampler's order of
// operations), written independently of fused_crop_math's tap code, into slot `slot` of `out`
// (host memory). In float32 it equals crop_resampler bit for bit; float16 and bfloat16 are the
// float32 values rounded to nearest even. Throws std::invalid_argument on a bad job or output.
void fused_crop_reference(const fused_crop_job& job, int slot, const fused_crop_output& out,
                          const fused_crop_normalizer& norm);

// The kernel's arithmetic on the host: every job into its slot, each output pixel computed by the
// same fused_crop_math calls the kernel makes, in the same order.
void fused_crop_emulate(const fused_crop_job* jobs, int n, const fused_crop_output& out,
                        const fused_crop_normalizer& norm);

}  // namespace trainbench
