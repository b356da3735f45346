#pragma once
// The convolution fusions of NVIDIA's MLPerf ResNet, as arithmetic: a batch norm and its ReLU
// folded into the next convolution. Forward, the previous convolution's output x is never
// normalised into memory: the convolution applies relu(x * eq_scale + eq_bias) to its input as it
// loads it, and emits the per-channel sum and sum of squares of its own output, from which the
// next batch norm's eq_scale and eq_bias follow ("finalize"). Backward, the data gradient's
// convolution applies the ReLU's gradient and reduces the batch norm's weight gradients as it
// stores, the weight gradient's convolution recomputes the activation as it loads, and one
// elementwise pass gives the batch norm's input gradient:
//   dx = eq_dy * dz + eq_x * x + eq_b   (per channel)
// These are the reference functions (plain ATen, any device, computed in float32, or float64 for
// float64 input) that the cuDNN graphs of cuda/cudnn_conv_fusion.hpp are held to, and that CI holds
// to autograd of conv(relu(batch_norm(x))). Tensors are N, C, H, W (any memory format); per-channel
// tensors have C elements.
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainbench/model/resnet.hpp"

namespace trainbench {

struct conv_geometry {
  std::int64_t stride = 1, padding = 0;
};

// The batch's statistics from a sum and a sum of squares over count elements per channel, and the
// batch norm's scale and shift folded into one multiply-add: eq_scale = gamma * inv_std,
// eq_bias = beta - mean * eq_scale. The biased variance normalises, as in training.
struct bn_finalized {
  at::Tensor mean, inv_std, eq_scale, eq_bias;
};
bn_finalized bn_finalize_reference(const at::Tensor& sum, const at::Tensor& sq_sum, std::int64_t count,
                                   const at::Tensor& gamma, const at::Tensor& beta, double eps);

// Forward: y = conv(relu(x * eq_scale + eq_bias), w) in x's dtype, and y's per-channel sum and
// sum of squares (float32, or float64).
struct conv_genstats {
  at::Tensor y, sum, sq_sum;
};
conv_genstats sbr_conv_genstats_reference(const at::Tensor& x, const at::Tensor& eq_scale, const at::Tensor& eq_bias,
                                          const at::Tensor& w, conv_geometry g);

// Backward, data side: da = the convolution's data gradient of dy; dz = da where
// x * eq_scale + eq_bias > 0, else 0 (in x's dtype); the batch norm's weight gradients
// dgamma = sum(dz * xhat), dbeta = sum(dz); and the coefficients of its input gradient.
struct dgrad_dbn {
  at::Tensor dz, dgamma, dbeta, eq_dy, eq_x, eq_b;
};
dgrad_dbn dgrad_drelu_dbn_weight_reference(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x,
                                           const at::Tensor& mean, const at::Tensor& inv_std, const at::Tensor& gamma,
                                           const at::Tensor& beta, conv_geometry g);

// Backward, weight side: the convolution's weight gradient, its input recomputed as
// relu(x * eq_scale + eq_bias).
at::Tensor sbr_wgrad_reference(const at::Tensor& x, const at::Tensor& eq_scale, const at::Tensor& eq_bias,
                               const at::Tensor& dy, const at::Tensor& w, conv_geometry g);

// dx = eq_dy * dz + eq_x * x + eq_b, in x's dtype and memory format.
at::Tensor dbn_apply_reference(const at::Tensor& dz, const at::Tensor& x, const at::Tensor& eq_dy,
                               const at::Tensor& eq_x, const at::Tensor& eq_b);

// bn's running statistics moved by one batch of f, PyTorch's way: the unbiased variance (from
// f.inv_std, as the fused kernels keep no other), bn's momentum, the batch counter advanced.
// count is N*H*W. Plain ATen, any device; not cuDNN's finalize update, whose variance convention
// its documentation does not state.
void update_running_statistics(torch::nn::BatchNorm2dImpl& bn, const bn_finalized& f, std::int64_t count);

// The gradients of one fused pair: the batch norm's input, scale and shift, the convolution's weight.
struct conv_fusion_gradients {
  at::Tensor dx, dw, dgamma, dbeta;
};

// The kernels a fused "batch norm, ReLU, convolution" of the training step runs
// (model/conv_fusion_op.hpp): the reference functions above on any device, or cuDNN's graphs for
// one shape (cuda/cudnn_conv_fusion.hpp). x, y and w in the activation dtype, the per-channel
// tensors float (double for double x).
class conv_fusion_kernels {
 public:
  virtual ~conv_fusion_kernels() = default;
  // Finalize from the sum and sum of squares a fused convolution emitted with x.
  virtual bn_finalized finalize(const at::Tensor& sum, const at::Tensor& sq_sum, std::int64_t count,
                                const at::Tensor& gamma, const at::Tensor& beta, double eps) = 0;
  // The same from x itself, where no fused convolution made x (the block's first convolution).
  virtual bn_finalized statistics(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta, double eps) = 0;
  // bn's running statistics moved by one batch of f, as update_running_statistics does.
  virtual void update_running(torch::nn::BatchNorm2dImpl& bn, const bn_finalized& f, std::int64_t count) {
    update_running_statistics(bn, f, count);
  }
  virtual conv_genstats forward(const at::Tensor& x, const bn_finalized& f, const at::Tensor& w, conv_geometry g) = 0;
  virtual conv_fusion_gradients backward(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x,
                                         const bn_finalized& f, const at::Tensor& gamma, const at::Tensor& beta,
                                         conv_geometry g) = 0;
};

// The reference functions as kernels: any shape, any device, any floating dtype.
std::shared_ptr<conv_fusion_kernels> reference_conv_fusion_kernels();

// A batch norm whose ReLU feeds a convolution and nothing else: the pairs these fusions fold. In
// torchvision's blocks, bn1 -> conv2, and in a bottleneck also bn2 -> conv3. (A block's last batch
// norm adds the residual, and the block's output is the next block's residual, so it is kept in
// memory and is not one of them; nor is the stem's, which feeds the max pool.) Grouped
// convolutions (ResNeXt's conv2) are left out, and so is any the graphs are not built for (a bias,
// dilation, a kernel, stride or padding that differs between the axes).
struct conv_fusion_site {
  std::string name;  // the convolution's, as in the state dict: "layer1.0.conv2"
  torch::nn::BatchNorm2dImpl* bn = nullptr;
  torch::nn::Conv2dImpl* conv = nullptr;
  std::vector<std::int64_t> input;  // the batch norm's input (= the convolution's): N, C, H, W
};
// Every such pair of the model at input_shape (N, 3, H, W), in the order the forward meets them.
// Runs the model once as batch_norm_sites does (model/fusion.hpp), and leaves it as it was.
std::vector<conv_fusion_site> conv_fusion_sites(resnet& model, const std::vector<std::int64_t>& input_shape);

// One pair's problem, what the fused graphs are built for (cuda/cudnn_conv_fusion.hpp).
struct conv_fusion_shape {
  at::ScalarType dtype = at::kHalf;
  std::int64_t n = 0, c = 0, h = 0, w = 0;  // the batch norm's input, the convolution's input
  std::int64_t k = 0, r = 0;                // output channels, a square r x r filter
  conv_geometry g;
  double eps = 1e-5, momentum = 0.1;  // the batch norm's
  std::int64_t out_h() const { return (h + 2 * g.padding - r) / g.stride + 1; }
  std::int64_t out_w() const { return (w + 2 * g.padding - r) / g.stride + 1; }
};

// The problem of one pair in activations of dtype.
conv_fusion_shape conv_fusion_problem(const conv_fusion_site& site, at::ScalarType dtype);

// The pairs of one shape: the first pair's convolution (whose weights a measurement uses) and
// every pair's name.
struct conv_fusion_group {
  conv_fusion_shape shape;
  torch::nn::Conv2dImpl* conv = nullptr;
  std::vector<std::string> layers;
};
// The sites grouped by shape and the batch norm's eps and momentum (the graphs are built for both), largest share
// of the model's convolution work first (layers x multiply-adds), so that a measurement stopped
// early has measured the shapes that matter most.
std::vector<conv_fusion_group> conv_fusion_groups(const std::vector<conv_fusion_site>& sites, at::ScalarType dtype);

}  // namespace trainbench
