#pragma once
// backend.compile's model half: batch norm with ReLU, and batch norm with the residual add and
// ReLU, each run as one op forward and backward, and the downsample branch's batch norm on the same
// kernels. The step asks for it once, when the pipeline is
// built; the model then runs the chosen ops (model/batch_norm_op.hpp) and never branches on the
// switch again.
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/model/resnet.hpp"

namespace trainbench {

struct fusion_request {
  c10::Device device = c10::kCPU;  // where the model and its batches are
  amp_mode amp = amp_mode::off;    // the batch norms' input dtype: fp16, bf16, or the model's
  bool channels_last = false;      // the cuDNN fusions run NHWC only
  // On the CPU, run the fusions through the reference ops (plain ATen, the arithmetic the fused
  // kernels must match) instead of leaving the unfused ops: for tests of the seam.
  bool cpu_reference = false;
  // N, C, H, W of the batches the model will see. On a GPU, every batch norm's shape at this
  // batch is checked against cuDNN before the first step (shapes it refuses run unfused, and the
  // outcome says so); empty: shapes are met, and refused, in the first step.
  std::vector<std::int64_t> input_shape;
  // On a GPU, the ways the two ReLU fusions may run: cuDNN's graphs, else (fp16) its batch-norm Ex
  // call (automatic), or one of them only (backend.fused_batch_norm; tests pin each).
  fused_bn_route route = fused_bn_route::automatic;
};

struct fusion_outcome {
  std::vector<std::string> applied;      // what runs fused, for the report's `effective`
  std::vector<std::string> ineffective;  // "<fusion>: <why it cannot run here>", for its notes
};

// The fusions by name, as `applied` and `ineffective` start.
inline constexpr const char* fusion_bn_relu = "batch norm + ReLU";
inline constexpr const char* fusion_bn_add_relu = "batch norm + add + ReLU";
inline constexpr const char* fusion_downsample_bn = "downsample batch norm";

// One batch-norm call of the model's forward: which fusion it would be, the module, and its
// input's N, C, H, W.
enum class batch_norm_kind { bn_relu, bn_add_relu, plain };
struct batch_norm_site {
  batch_norm_kind kind = batch_norm_kind::plain;
  torch::nn::BatchNorm2dImpl* bn = nullptr;
  std::vector<std::int64_t> shape;
};

// The activation dtype the fused kernels get: fp16 or bf16 under train.amp, else the model's;
// why_not says where cuDNN has no fusion for it (fp64). name: "fp16", "bf16", "fp32", "fp64".
struct fusion_dtype {
  at::ScalarType type = at::kFloat;
  std::string name;
  std::string why_not;
};
fusion_dtype fusion_activation_dtype(resnet& model, amp_mode amp);

// Every batch-norm call of one forward at input_shape (N, C, H, W), in call order. The model runs
// once in eval mode, without gradients, on a single zero image (no shape but N depends on the
// batch; N is then set to input_shape's), and is left as it was: its mode, weights, statistics and
// batch-norm ops. cuDNN's settings are left alone too: with its benchmark on, the one-image
// convolutions are timed as any other shape would be.
std::vector<batch_norm_site> batch_norm_sites(resnet& model, const std::vector<std::int64_t>& input_shape);

// Switches the model's batch norms (with their ReLU, and with the residual add) to fused ops
// where this device and dtype have them. On a GPU each fusion is first built, run once on a small
// problem and held against the reference; a fusion that cannot be built there or that differs
// keeps the unfused ops, and `ineffective` says why. With request.input_shape, each batch norm's
// shape is then checked against cuDNN: a fusion cuDNN refuses for some shapes runs unfused there
// (`applied` says how many, `ineffective` names them), for all of them is ineffective. Call it after the model is on
// its device and in its memory format, before the first step (and so before any CUDA graph capture).
fusion_outcome fuse_batch_norm(resnet& model, const fusion_request& request);

// What fuse_batch_norm will need from the process before any thread starts (cuDNN's frontend
// reads its CUDA runtime's name from the environment): on a CUDA device, the pipeline calls it
// first thing with backend.compile.
void prepare_fusions(c10::Device device);

}  // namespace trainbench
