#include "trainbench/data/crop_tensor.hpp"

#include <ATen/ATen.h>

#include <vector>

#include "trainbench/data/transform.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

// One axis's taps as a size x extent matrix: row i holds output i's weights at its source indices.
at::Tensor tap_matrix(const crop_axis& a, int size, int extent) {
  const resize_taps t = make_span_taps(a.start, a.length, a.out_total, a.out_first, size, a.lo, a.hi);
  std::vector<float> m(static_cast<std::size_t>(size) * extent, 0.f);
  for (int i = 0; i < size; ++i)
    for (int k = 0; k < t.count[i]; ++k) {
      const int from = t.start[i] + k;
      TB_ASSERT(from >= 0 && from < extent, "crop_by_taps: a tap reads outside the pixels");
      m[static_cast<std::size_t>(i) * extent + from] += t.weights[static_cast<std::size_t>(i) * t.max_taps + k];
    }
  return at::from_blob(m.data(), {size, extent}, at::kFloat).clone();
}

}  // namespace

at::Tensor crop_by_taps(const at::Tensor& pixels, const fused_crop_plan& plan, int size) {
  TB_ASSERT(pixels.dim() == 3 && pixels.size(2) == 3 && pixels.scalar_type() == at::kByte,
            "crop_by_taps: expected height x width x 3 uint8 pixels");
  const auto height = static_cast<int>(pixels.size(0)), width = static_cast<int>(pixels.size(1));
  // In float64: a float32 matmul on a GPU may run in TF32 (backend.tf32), ten bits of mantissa.
  const auto f64 = at::TensorOptions().device(pixels.device()).dtype(at::kDouble);
  const at::Tensor rows = tap_matrix(plan.y, size, height).to(f64);
  at::Tensor cols = tap_matrix(plan.x, size, width);
  if (plan.flip) cols = cols.flip({0});
  const at::Tensor x = pixels.permute({2, 0, 1}).to(at::kDouble);  // 3 x height x width
  return at::matmul(at::matmul(rows, x), cols.to(f64).t()).to(at::kFloat);
}

}  // namespace trainbench
