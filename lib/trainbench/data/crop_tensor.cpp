#include "trainbench/data/crop_tensor.hpp"

#include <ATen/ATen.h>

#include "trainbench/data/transform.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

// One axis's taps as a size x extent float64 matrix on `like`'s device: row i holds output i's
// weights at its source indices. Made in pinned memory for a CUDA device, so its copy does not wait
// for the stream (a copy from pageable memory would block the host until the decode stream ran it).
at::Tensor tap_matrix(const crop_axis& a, int size, int extent, const at::Tensor& like) {
  const resize_taps t = make_span_taps(a.start, a.length, a.out_total, a.out_first, size, a.lo, a.hi);
  const bool pin = like.is_cuda();
  at::Tensor m = at::zeros({size, extent}, at::TensorOptions().dtype(at::kDouble).pinned_memory(pin));
  double* w = m.data_ptr<double>();
  for (int i = 0; i < size; ++i)
    for (int k = 0; k < t.count[i]; ++k) {
      const int from = t.start[i] + k;
      TB_ASSERT(from >= 0 && from < extent, "crop_by_taps: a tap reads outside the pixels");
      w[static_cast<std::size_t>(i) * extent + from] += t.weights[static_cast<std::size_t>(i) * t.max_taps + k];
    }
  return m.to(like.device(), /*non_blocking=*/pin);
}

}  // namespace

at::Tensor crop_by_taps(const at::Tensor& pixels, const fused_crop_plan& plan, int size) {
  TB_ASSERT(pixels.dim() == 3 && pixels.size(2) == 3 && pixels.scalar_type() == at::kByte,
            "crop_by_taps: expected height x width x 3 uint8 pixels");
  const auto height = static_cast<int>(pixels.size(0)), width = static_cast<int>(pixels.size(1));
  // In float64: a float32 matmul on a GPU may run in TF32 (backend.tf32), ten bits of mantissa.
  const at::Tensor rows = tap_matrix(plan.y, size, height, pixels);
  at::Tensor cols = tap_matrix(plan.x, size, width, pixels);
  if (plan.flip) cols = cols.flip({0});
  const at::Tensor x = pixels.permute({2, 0, 1}).to(at::kDouble);  // 3 x height x width
  return at::matmul(at::matmul(rows, x), cols.t()).to(at::kFloat);
}

}  // namespace trainbench
