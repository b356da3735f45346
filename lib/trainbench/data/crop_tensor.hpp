#pragma once
// The fused crop's arithmetic in ATen ops, on any device: the device decode's fallback where the
// fused kernel does not run (its check at construction failed, or a batch shrinks an image by more
// than its filters hold). The host path's taps (make_span_taps, from the plan's fractional span)
// as two matrices, rows then columns, multiplied in float64; the flip reverses the columns' matrix.
// Within float rounding of fused_crop_reference, whose sums run in float32 in another order.
#include <ATen/core/Tensor.h>

#include "trainbench/data/fused_crop_math.hpp"

namespace trainbench {

// pixels: height x width x 3 uint8 (packed RGB rows, the plan's region), on any device. Returns
// 3 x size x size float32 on that device, not normalised (0 to 255).
at::Tensor crop_by_taps(const at::Tensor& pixels, const fused_crop_plan& plan, int size);

}  // namespace trainbench
