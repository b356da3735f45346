#pragma once
// The last pass of the fused convolution's backward (model/conv_fusion.hpp): a batch norm's input
// gradient from the ReLU-masked gradient dz, its input x and three per-channel coefficients,
//   dx = eq_dy[c] * dz + eq_x[c] * x + eq_b[c],
// one read of dz and x and one write of dx, in float arithmetic. No CUDA or torch headers here.
#include <cstdint>

struct CUstream_st;

namespace trainbench {

enum class dbn_apply_type { f16, bf16, f32 };

// dz, x and dx: numel elements of `type`, NHWC-contiguous (the channel of element i is
// i % channels); eq_*: `channels` floats; all device memory of the current device. Launches on
// `stream`, asynchronously; a launch failure throws run_error. 16-byte aligned tensors with
// channels a multiple of the 16-byte vector's elements take the vector path.
void launch_dbn_apply(dbn_apply_type type, const void* dz, const void* x, const float* eq_dy, const float* eq_x,
                      const float* eq_b, void* dx, std::int64_t numel, std::int64_t channels, CUstream_st* stream);

}  // namespace trainbench
