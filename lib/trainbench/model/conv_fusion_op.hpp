#pragma once
// backend.conv_fusion: every batch norm whose ReLU feeds only a convolution (conv_fusion_sites)
// runs with that convolution as one autograd op, NVIDIA's MLPerf ResNet fusions
// (model/conv_fusion.hpp): the normalised activation is never written, forward or backward, and a
// fused convolution's output carries its own statistics to the next batch norm. The model reaches
// it through batch_norm_ops::bn_relu_conv; every other batch norm keeps the ops it had
// (backend.compile's fused ones, or the unfused).
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/conv_fusion.hpp"
#include "trainbench/model/fusion.hpp"

namespace trainbench {

inline constexpr const char* fusion_bn_relu_conv = "batch norm + ReLU + convolution";

// conv(relu(bn(in.y))) as one autograd op on `kernels`, for a fusable bn (model/batch_norm_op.hpp)
// and a plain square convolution: the batch norm's statistics from in.sum and in.sq_sum where set,
// else from in.y; bn's running statistics updated. The result carries y's sum and sum of squares.
// The weight is cast to in.y's dtype on the way (autocast's cast, differentiable), so its gradient
// reaches the float parameter.
// The kernels stay held until the op's backward has run.
conv_output fused_bn_relu_conv(const std::shared_ptr<conv_fusion_kernels>& kernels, torch::nn::BatchNorm2dImpl& bn,
                               torch::nn::Conv2dImpl& conv, const conv_output& in);

// Where the fused op runs: the kernels, and the input they were built for (N, C, H, W, dtype and
// the batch norm's eps; an empty shape takes any, as the reference kernels do). A CUDA graph
// captured with the op replays the kernels' plans and buffers: the ops that hold them (and so the
// model) must outlive it.
struct conv_fusion_plan {
  std::shared_ptr<conv_fusion_kernels> kernels;
  std::vector<std::int64_t> input;
  at::ScalarType dtype = at::kFloat;
  double eps = 1e-5;
};
using conv_fusion_plans = std::map<const torch::nn::Conv2dImpl*, conv_fusion_plan>;

// Ops that run fused_bn_relu_conv for the planned convolutions, where the call matches the plan
// (shape, dtype, NHWC for a sized plan, bn in training mode), and `inner` for everything else.
std::shared_ptr<batch_norm_ops> conv_fusion_ops(std::shared_ptr<batch_norm_ops> inner, conv_fusion_plans plans);

// Switches the model's batch-norm-ReLU-convolution pairs to the fused op where this device and
// dtype have it, on top of the ops in use (call after fuse_batch_norm). On a GPU each distinct
// shape at request.input_shape (required there) gets cuDNN's graphs, first held against the
// reference on a problem of that shape; a shape cuDNN refuses or gets wrong runs unfused, and
// `ineffective` says why. On the CPU, request.cpu_reference runs the reference kernels (tests).
fusion_outcome fuse_convolutions(resnet& model, const fusion_request& request);

}  // namespace trainbench
