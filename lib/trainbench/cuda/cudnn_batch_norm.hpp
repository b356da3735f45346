#pragma once
// Batch norm with ReLU, and with the residual add and ReLU, as cuDNN frontend graphs (the
// "BnAddRelu" and "DReluForkDBn" patterns NVIDIA's MLPerf ResNet runs): NHWC, fp16/bf16/fp32
// activations, fp32 scale, bias and statistics. Forward: batch norm, [+ residual], ReLU, and a
// bit mask of where the output is positive. Backward: the mask times dY (kept as the residual's
// gradient where there is one), then batch norm's backward. Where cuDNN refuses the mask, the
// other form: the forward writes none, and the backward takes the ReLU's gradient from the saved
// output (relu_backward(dY, y), as NVIDIA's samples do). The downsample branch's plain batch
// norm runs the same graphs without the ReLU and the mask. One graph per shape, built on first
// use (never during CUDA graph capture) and cached; a shape cuDNN refuses runs unfused. Without
// a CUDA LibTorch, or without the frontend's headers at build time, the probe says why and
// nothing else is reached.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/modules/batchnorm.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/model/batch_norm_op.hpp"

namespace trainbench {

struct cudnn_fusion_check {
  bool works = false;
  std::string why;  // why not, where it does not
  // Whether the graph's next running variance holds the biased batch variance, where PyTorch's
  // holds the unbiased one (classify_running_var; cuDNN's graph API documents neither). Where it
  // does, the ops correct it after each call (unbias_running_var).
  bool unbias = false;
  // With ReLU: the backward takes the ReLU's gradient from the forward's output, saved, where
  // cuDNN refuses (or gets wrong) the first form, a bit mask the forward writes. The probe tries the
  // mask first, then this.
  bool relu_from_output = false;
  std::string mask_refusal;  // with relu_from_output: why the bit mask was not taken
  // With ReLU, in fp16: the fusion runs cuDNN's batch-norm Ex call (cuda/cudnn_batch_norm_ex.hpp)
  // instead of a graph, where cuDNN builds neither graph form or gets them wrong; graph_refusal
  // says why the graphs were not taken.
  bool ex_call = false;
  std::string graph_refusal;
};
struct cudnn_fusion_probe {
  cudnn_fusion_check bn_relu, bn_add_relu, batch_norm;  // the last: plain, for the downsample branch
};

// Builds each graph's forward and backward for a small NHWC problem on `device` in
// `dtype` (with ReLU, where both graph forms fail in fp16: cuDNN's batch-norm Ex call instead),
// runs them once and holds the results against the reference ops (reference_batch_norm_relu,
// _add_relu, reference_batch_norm) within fused_batch_norm_tolerance, after finding which batch
// variance the graph's running variance holds (a fusion whose running variance, corrected where
// needed, is not the unbiased one is refused). The finding is made on the probe's one shape and
// taken to hold for every shape: cuDNN's engines for one graph pattern compute it one way.
// Synchronises the device: call it when the pipeline is built.
// route: which ways the ReLU fusions may run (backend.fused_batch_norm: fusion_request::route).
cudnn_fusion_probe probe_cudnn_batch_norm(c10::Device device, at::ScalarType dtype,
                                          fused_bn_route route = fused_bn_route::automatic);

// Loads cuDNN for the graphs and names, in an environment variable, the CUDA runtime the cuDNN
// frontend will open. setenv is not safe beside a getenv on another thread (libjpeg-turbo's
// workers and NCCL read theirs), so the pipeline calls this before it starts any; later calls
// find it done. A failure here is left for the probe, which reports it.
void prepare_cudnn_batch_norm() noexcept;

// The fused ops for the fusions the probe passed, with its running-variance correction (the
// others, and any call they cannot take: another dtype, eval mode, a batch norm that is not
// fusable, run unfused).
std::shared_ptr<batch_norm_ops> cudnn_batch_norm_ops(c10::Device device, at::ScalarType dtype,
                                                     const cudnn_fusion_probe& probe);

// Whether the fused ops take an activation of this many elements (cuDNN's graphs are driven with
// 32-bit element counts here); larger ones run unfused.
inline bool cudnn_batch_norm_fits(std::int64_t numel) { return numel < std::numeric_limits<std::int32_t>::max(); }

// "" where cuDNN takes this fusion (relu; add, with relu; neither: the plain batch norm) for bn with
// an input of shape N, C, H, W in dtype, else why not. The probe checks one small shape; an
// engine may still refuse another (a 1x1 map, a large batch). Decided once per shape and
// remembered: it builds the forward and the backward graph (kept); the ops cudnn_batch_norm_ops
// makes run a refused shape unfused, and ask this themselves for a shape met first in a step.
// Errors other than cuDNN's refusal (out of memory, a driver error) are thrown, not remembered.
// Not during a CUDA graph capture.
// With check: the route and form that fusion's probe chose (its relu_from_output, its ex_call).
std::string cudnn_batch_norm_refusal(const torch::nn::BatchNorm2dImpl& bn, at::IntArrayRef nchw, at::ScalarType dtype,
                                     bool relu, bool add, bool relu_from_output = false);
std::string cudnn_batch_norm_refusal(const torch::nn::BatchNorm2dImpl& bn, at::IntArrayRef nchw, at::ScalarType dtype,
                                     bool relu, bool add, const cudnn_fusion_check& check);

// The forward and backward graphs of a fusion (relu; add, with relu; neither: the plain batch
// norm; mask: the bit-mask form) at N, C, H, W in dtype, as far as the frontend's own checks go
// (validate: shapes, types, every attribute a node needs), with no GPU and no cuDNN handle: "" where
// they pass, else the first failure. A graph that fails here would be refused on every GPU; CI runs it.
std::string cudnn_batch_norm_graph_check(at::ScalarType dtype, bool relu, bool add, bool mask, at::IntArrayRef nchw);

// Drops the graphs, plans and shape decisions of batch norms whose batch (N) is one of `batches`:
// train.batch_size: auto's tries build them for sizes the run does not take. Call it when no step
// that ran them is alive (no captured graph replays them).
void forget_cudnn_batch_norm_batches(const std::vector<std::int64_t>& batches);

// One fused call, for tests: relu(bn(x) [+ residual]) through the cuDNN graphs, autograd-aware.
// x: a CUDA N,C,H,W tensor (made NHWC if it is not); residual may be undefined. unbias_running_var:
// correct the graph's running variance as the ops do where the probe says it is biased.
// relu_from_output: the second form (cudnn_fusion_check::relu_from_output).
torch::Tensor cudnn_batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                    const torch::Tensor& residual, bool unbias_running_var = false,
                                    bool relu_from_output = false);
// bn(x) alone through the cuDNN graphs, for tests.
torch::Tensor cudnn_batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                               bool unbias_running_var = false);

// How far the fused ops may be from the reference, per activation dtype: outputs and the input
// and residual gradients within atol + rtol * max|reference|; the scale and bias gradients and
// the running statistics, which are fp32, within stats_rtol * max|reference|.
struct fused_tolerance {
  double atol, rtol, stats_rtol;
};
inline fused_tolerance fused_batch_norm_tolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return {1e-2, 1e-2, 1e-2};
    case at::kBFloat16:
      return {5e-2, 2e-2, 3e-2};
    default:
      return {1e-4, 1e-4, 1e-3};
  }
}

}  // namespace trainbench
