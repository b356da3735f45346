#pragma once
// The seam between ResNet's blocks and their batch norms: every "batch norm, then ReLU", every
// "batch norm, add the residual, then ReLU" and the downsample branch's plain batch norm go through
// one batch_norm_ops object, chosen once when the model is built or fused (model/fusion.hpp).
// Implementations:
//   - unfused: the module's own batch norm, then ATen's in-place add and ReLU (the default);
//   - reference: the same arithmetic in plain ATen ops, statistics in float (double for double
//     input), autograd-correct on any device; CI holds it against the unfused ops, and the fused
//     CUDA ops' [gpu] tests hold them against it;
//   - cuDNN (cuda/cudnn_batch_norm.hpp): one fused graph forward, one backward, NHWC.
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace trainbench {

// A convolution's output, with its per-channel sum and sum of squares where a fused convolution
// emitted them (else undefined): the next batch norm's statistics, already reduced.
struct conv_output {
  torch::Tensor y, sum, sq_sum;
};

class batch_norm_ops {
 public:
  virtual ~batch_norm_ops() = default;
  // relu(bn(x)), updating bn's running statistics in training mode as bn(x) does.
  virtual torch::Tensor bn_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) = 0;
  // relu(bn(x) + residual).
  virtual torch::Tensor bn_add_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                    const torch::Tensor& residual) = 0;
  // bn(x) alone: the downsample branch's batch norm.
  virtual torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) = 0;
  // conv(relu(bn(in.y))): a batch norm whose ReLU feeds only a convolution. By default the two
  // apart, through bn_relu; backend.conv_fusion's ops (model/conv_fusion_op.hpp) fold them and use
  // in's statistics where it has them.
  virtual conv_output bn_relu_conv(torch::nn::BatchNorm2dImpl& bn, torch::nn::Conv2dImpl& conv, const conv_output& in) {
    return {conv.forward(bn_relu(bn, in.y)), {}, {}};
  }
};

// The module's batch norm, then in-place add and ReLU: what torchvision's blocks run.
std::shared_ptr<batch_norm_ops> unfused_batch_norm_ops();

// The reference for any of the three (plain batch norm, + ReLU, + add + ReLU); one not chosen runs
// unfused.
std::shared_ptr<batch_norm_ops> reference_batch_norm_ops(bool batch_norm, bool bn_relu, bool bn_add_relu);

// Whether a fused op can stand in for bn's forward: training mode, affine, running statistics
// tracked with a set momentum (an unset one means a cumulative average, whose factor LibTorch
// reads on the host). Where not, every implementation runs the unfused ops.
bool fusable(const torch::nn::BatchNorm2dImpl& bn);

// relu(bn(x) [+ residual]) in plain ATen ops, for a fusable bn: batch statistics (the biased
// variance normalises, the unbiased one goes into running_var, with bn's momentum), the batch
// counter advanced. The output has x's dtype and memory format; `residual` may be undefined.
torch::Tensor reference_batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                        const torch::Tensor& residual);
// bn(x) in the same plain ATen ops, without the ReLU.
torch::Tensor reference_batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x);

// Which batch variance a running variance holds after one training-mode update from `before` with
// `momentum` on the batch x (N,C,H,W): PyTorch's convention, the unbiased variance (times M/(M-1),
// M = N*H*W), or the biased one that normalises. cuDNN's graph API documents neither; the fused
// ops' probe asks the device with this. `neither` when `got` is not within a quarter of the gap
// between the two candidates of one of them, for every channel; x's values should keep every
// channel's variance well above zero, as make_batch_norm_problem's do.
enum class running_var_kind { unbiased, biased, neither };
running_var_kind classify_running_var(const torch::Tensor& got, const torch::Tensor& before, const torch::Tensor& x,
                                      double momentum);
const char* running_var_kind_name(running_var_kind k);

// Turns an update made with the biased batch variance into PyTorch's: running_var = next_var +
// momentum * var / (M - 1), the batch's biased variance var taken back from the inverse standard
// deviation the batch norm saved (var = inv_std^-2 - eps). count is M; in place, on any device,
// three small kernels on a GPU.
void unbias_running_var(const torch::Tensor& running_var, const torch::Tensor& next_var, const torch::Tensor& inv_std,
                        double eps, double momentum, std::int64_t count);

// Which kernels PyTorch's own batch norm (what the unfused ops run) picks for an input of `dtype`
// with fp32 weights, as under autocast: "cudnn", "miopen" or "native". Asked of PyTorch
// (at::native::_select_batch_norm_backend) with a small tensor on `device`; the layout is passed
// as a run has it, though PyTorch 2.11 reads it on MIOpen's branch only.
std::string pytorch_batch_norm_backend(c10::Device device, at::ScalarType dtype, bool channels_last);

// The note a bf16 run gets where PyTorch runs its batch norms on other kernels in bf16 than in
// fp16 (PyTorch 2.11 gives cuDNN fp16 and fp32, never bf16), so that a bf16 rung slower than its
// fp16 twin is not read as the cost of the dtype alone. Empty where both get the same kernels.
std::string bf16_batch_norm_note(c10::Device device, bool channels_last);

// A test problem for relu(bn(x) [+ residual]) whose pre-ReLU values all stay well away from zero,
// so that implementations that differ by rounding agree on every element's ReLU mask (a flipped
// element would move its channel's gradients by a whole dY). Each channel's values lie on a 1/16
// grid (exact in fp16 and bf16), mirrored around an offset (the batch mean, exactly); the weight is
// positive and the bias small; with add, the residual puts every sum at +-(0.25..1). N must be
// even. x, residual and dy are NHWC in `dtype`; weight and bias are fp32 (fp64 for fp64).
struct batch_norm_problem {
  torch::Tensor x, residual, dy, weight, bias;
};
batch_norm_problem make_batch_norm_problem(const std::array<std::int64_t, 4>& nchw, at::ScalarType dtype, bool add,
                                           std::uint64_t seed, c10::Device device, double eps = 1e-5);

}  // namespace trainbench
