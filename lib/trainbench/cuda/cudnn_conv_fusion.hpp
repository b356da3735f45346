#pragma once
// NVIDIA's MLPerf ResNet convolution fusions (model/conv_fusion.hpp) as cuDNN frontend graphs, for
// one "batch norm, ReLU, convolution" of a model at one shape: the batch norm's finalize from
// its input's sum and sum of squares; the convolution with a scale-bias-ReLU prologue and a
// genstats epilogue; the data gradient's convolution with the ReLU's gradient and the batch
// norm's weight gradients in its epilogue; the weight gradient's convolution with the same
// prologue; and the batch norm's input gradient in one pass of our own (cuda/dbn_apply.hpp).
// `fusion-bench` times them against what backend.compile runs for the same layers, so that a GPU
// run says what they would buy before the model is rebuilt around them. NHWC, fp16, bf16 or fp32
// activations; NVIDIA's samples run these patterns on Ampere and Hopper.
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/conv_fusion.hpp"

namespace trainbench {

// cuDNN declines a graph of the fusion for this shape, or this build has none.
struct conv_fusion_refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class cudnn_conv_fusion {
 public:
  // Builds the four graphs on the current CUDA device with this thread's cuDNN handle: with
  // autotune every plan cuDNN builds, timed on each graph's first call, else cuDNN's first
  // heuristic plan. Throws with cuDNN's refusal (conv_fusion_refused) or the failure (the first
  // line says which graph), or, in a build without the frontend's headers, why there are none
  // (conv_fusion_refused too). A plan runs with the handle of the thread that runs it: another
  // thread (autograd's, for a training op's backward) gets graphs of its own, built on its first
  // call, which must not be made during a CUDA graph capture (one eager step first).
  cudnn_conv_fusion(const conv_fusion_shape& s, bool autotune);
  ~cudnn_conv_fusion();
  cudnn_conv_fusion(const cudnn_conv_fusion&) = delete;
  cudnn_conv_fusion& operator=(const cudnn_conv_fusion&) = delete;

  // The batch norm's statistics and folded scale and bias from its input's sum and sum of squares,
  // and its running statistics updated in place with the shape's momentum (float, C each).
  bn_finalized finalize(const at::Tensor& sum, const at::Tensor& sq_sum, const at::Tensor& gamma,
                        const at::Tensor& beta, const at::Tensor& running_mean, const at::Tensor& running_var);
  // The same, cuDNN's running-statistics update read from prev_* and written to next_* (four
  // distinct float tensors of C), nothing copied: for a caller that keeps its own statistics.
  bn_finalized finalize_to(const at::Tensor& sum, const at::Tensor& sq_sum, const at::Tensor& gamma,
                           const at::Tensor& beta, const at::Tensor& prev_mean, const at::Tensor& prev_var,
                           const at::Tensor& next_mean, const at::Tensor& next_var);
  // y = conv(relu(x * eq_scale + eq_bias), w), with y's sum and sum of squares. x and w NHWC in
  // the shape's dtype.
  conv_genstats forward(const at::Tensor& x, const bn_finalized& f, const at::Tensor& w);
  using gradients = conv_fusion_gradients;
  // From y's gradient dy: the batch norm's input gradient and weight gradients, and the
  // convolution's weight gradient.
  gradients backward(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x, const bn_finalized& f,
                     const at::Tensor& gamma, const at::Tensor& beta);
  // How the graphs were typed (float scale and bias, or in the activation dtype as NVIDIA's
  // samples pass them) and planned.
  std::string describe() const;

  // The four graphs of shape s as far as the frontend's own checks go (validate: shapes, types,
  // every attribute a node needs), with no GPU and no cuDNN handle: "" where they pass, else the
  // first failure. A graph that fails here would be refused on every GPU; CI runs it.
  static std::string check_graphs(const conv_fusion_shape& s);

 private:
  cudnn_conv_fusion() = default;
  struct graphs;
  void build_graphs(graphs& g, bool validate_only);
  graphs& current();  // the graphs of this thread's handle
  conv_fusion_shape s_;
  bool autotune_ = false;
  std::unique_ptr<graphs> g_;  // the constructing thread's
  std::mutex mutex_;
  std::map<void*, std::unique_ptr<graphs>> others_;  // by cuDNN handle
};

// One shape's measurement: both sides compute, from the same inputs, the convolution's output and
// the gradients of the batch norm's input, scale and shift and of the convolution's weight.
//   unfused: what backend.compile runs for the pair now, forward and backward through autograd:
//            `ops.bn_relu` (cuDNN's fused batch norm + ReLU), then the convolution;
//   fused:   finalize, the prologued convolution with genstats, the fused data gradient, the
//            prologued weight gradient, the apply pass (cudnn_conv_fusion).
// (The fused side makes the statistics of its output and takes its input's from the previous
// convolution; the unfused side reduces its input. Over a model each is counted once.)
// The sides alternate over `rounds`, each timed over `calls` back-to-back calls between two CUDA
// events, after one untimed call each (with autotune the fused side's times its plans there, as
// cudnn.benchmark times the unfused convolutions' algorithms in theirs).
struct conv_fusion_timing {
  std::string refused;  // "" where the fused graphs built, else cuDNN's refusal (other errors throw)
  std::string wrong;    // "" where the fused results agree with the reference, else what differs
  std::string how;      // cudnn_conv_fusion::describe()
  double max_relative_error = 0.0;           // over the outputs, in the norm of each
  std::vector<double> unfused_ms, fused_ms;  // per call, one entry per round
};
conv_fusion_timing time_conv_fusion(const conv_fusion_shape& s, const at::Tensor& weight, batch_norm_ops& unfused,
                                    int rounds, int calls, bool autotune);

// The graphs of shape s as training kernels (backend.conv_fusion, model/conv_fusion_op.hpp),
// first run once on a random problem of that shape (weight: the first pair's convolution weight,
// on the device) and held against the reference. Exactly one of kernels, refused (cuDNN declines
// the shape, or this build has no frontend) and wrong (what differs) is set; other errors throw.
// cuDNN's finalize updates running statistics of the kernels' own, never read; the model's are
// updated PyTorch's way in one kernel (PyTorch's SyncBatchNorm update, for one rank).
struct conv_fusion_build {
  std::shared_ptr<conv_fusion_kernels> kernels;
  std::string refused, wrong;
};
conv_fusion_build build_cudnn_conv_fusion(const conv_fusion_shape& s, const at::Tensor& weight);

// How far the fused results may be from the reference per activation dtype: each output's norm
// of the difference over its norm.
inline double conv_fusion_tolerance(at::ScalarType dtype) {
  return dtype == at::kBFloat16 ? 5e-2 : dtype == at::kHalf ? 2e-2 : 1e-2;  // fp32 convolutions may run TF32
}

}  // namespace trainbench
