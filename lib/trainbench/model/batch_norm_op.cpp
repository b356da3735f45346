#include "trainbench/model/batch_norm_op.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/native/Normalization.h>

#include <algorithm>

namespace trainbench {

namespace {

class unfused_ops final : public batch_norm_ops {
 public:
  torch::Tensor bn_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    return bn.forward(x).relu_();
  }
  torch::Tensor bn_add_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& residual) override {
    return bn.forward(x).add_(residual).relu_();
  }
  torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override { return bn.forward(x); }
};

// relu(bn(x) [+ residual]), or bn(x) alone: see reference_batch_norm_relu.
torch::Tensor reference(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual,
                        bool relu);

class reference_ops final : public batch_norm_ops {
 public:
  reference_ops(bool plain, bool relu, bool add_relu) : plain_(plain), relu_(relu), add_relu_(add_relu) {}
  torch::Tensor bn_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    if (!relu_ || !fusable(bn)) return bn.forward(x).relu_();
    return reference_batch_norm_relu(bn, x, torch::Tensor());
  }
  torch::Tensor bn_add_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& residual) override {
    if (!add_relu_ || !fusable(bn)) return bn.forward(x).add_(residual).relu_();
    return reference_batch_norm_relu(bn, x, residual);
  }
  torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    if (!plain_ || !fusable(bn)) return bn.forward(x);
    return reference_batch_norm(bn, x);
  }

 private:
  bool plain_, relu_, add_relu_;
};

}  // namespace

std::shared_ptr<batch_norm_ops> unfused_batch_norm_ops() {
  static const auto ops = std::make_shared<unfused_ops>();  // stateless: one for every model
  return ops;
}

std::shared_ptr<batch_norm_ops> reference_batch_norm_ops(bool batch_norm, bool bn_relu, bool bn_add_relu) {
  return std::make_shared<reference_ops>(batch_norm, bn_relu, bn_add_relu);
}

bool fusable(const torch::nn::BatchNorm2dImpl& bn) {
  const auto& o = bn.options;
  return bn.is_training() && o.affine() && o.track_running_stats() && o.momentum().has_value() &&
         bn.num_batches_tracked.defined();
}

torch::Tensor reference_batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                        const torch::Tensor& residual) {
  return reference(bn, x, residual, true);
}

torch::Tensor reference_batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) {
  return reference(bn, x, torch::Tensor(), false);
}

namespace {
torch::Tensor reference(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, const torch::Tensor& residual,
                        bool relu) {
  TORCH_CHECK(x.dim() == 4, "batch norm: expected an N,C,H,W input, got ", x.sizes());
  // Statistics in float for half inputs (as cuDNN's and ATen's kernels accumulate), in double
  // for a double model.
  const at::ScalarType compute = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const double momentum = *bn.options.momentum(), eps = bn.options.eps();
  const at::Tensor xf = x.to(compute);
  const at::Tensor mean = xf.mean({0, 2, 3});
  const at::Tensor var = xf.var({0, 2, 3}, /*unbiased=*/false);
  const at::Tensor invstd = (var + eps).rsqrt();
  auto per_channel = [](const at::Tensor& t) { return t.view({1, -1, 1, 1}); };
  at::Tensor y = (xf - per_channel(mean)) * per_channel(invstd * bn.weight.to(compute)) +
                 per_channel(bn.bias.to(compute));
  if (residual.defined()) y = y + residual.to(compute);
  if (relu) y = at::relu(y);
  y = y.to(x.scalar_type());
  {
    at::NoGradGuard no_grad;
    const double n = static_cast<double>(x.numel() / x.size(1));
    const at::Tensor unbiased = var.detach() * (n / std::max(n - 1.0, 1.0));
    bn.running_mean.mul_(1.0 - momentum).add_(mean.detach().to(bn.running_mean.scalar_type()), momentum);
    bn.running_var.mul_(1.0 - momentum).add_(unbiased.to(bn.running_var.scalar_type()), momentum);
    bn.num_batches_tracked.add_(1);
  }
  return y;
}
}  // namespace

running_var_kind classify_running_var(const torch::Tensor& got, const torch::Tensor& before, const torch::Tensor& x,
                                      double momentum) {
  TORCH_CHECK(x.dim() == 4, "classify_running_var: expected an N,C,H,W batch, got ", x.sizes());
  TORCH_CHECK(got.numel() == x.size(1) && before.numel() == x.size(1),
              "classify_running_var: expected one running variance per channel (", x.size(1), "), got ", got.numel(),
              " and ", before.numel());
  const at::Tensor xd = x.detach().to(at::kCPU, at::kDouble);
  const double m = static_cast<double>(x.numel() / x.size(1));
  TORCH_CHECK(m > 1, "classify_running_var: one value per channel has no unbiased variance");
  const at::Tensor biased_var = xd.var({0, 2, 3}, /*unbiased=*/false);
  const at::Tensor kept = before.detach().to(at::kCPU, at::kDouble).reshape({-1}) * (1.0 - momentum);
  const at::Tensor biased = kept + biased_var * momentum, unbiased = kept + biased_var * (momentum * m / (m - 1.0));
  const at::Tensor g = got.detach().to(at::kCPU, at::kDouble).reshape({-1});
  const at::Tensor gap = (unbiased - biased).abs();
  if (gap.min().item<double>() <= 0) return running_var_kind::neither;
  auto within = [&](const at::Tensor& candidate) {
    return ((g - candidate).abs() / gap).max().item<double>() < 0.25;
  };
  if (within(unbiased)) return running_var_kind::unbiased;
  if (within(biased)) return running_var_kind::biased;
  return running_var_kind::neither;
}

const char* running_var_kind_name(running_var_kind k) {
  switch (k) {
    case running_var_kind::unbiased:
      return "the unbiased batch variance";
    case running_var_kind::biased:
      return "the biased batch variance";
    default:
      return "neither the unbiased nor the biased batch variance";
  }
}

void unbias_running_var(const torch::Tensor& running_var, const torch::Tensor& next_var, const torch::Tensor& inv_std,
                        double eps, double momentum, std::int64_t count) {
  TORCH_CHECK(count > 1, "unbias_running_var: one value per channel has no unbiased variance");
  const double k = momentum / static_cast<double>(count - 1);
  at::NoGradGuard no_grad;
  // next_var + k * (inv_std^-2 - eps), written straight into running_var (a handle to the same storage).
  at::Tensor out = running_var;
  at::add_out(out, next_var, inv_std.pow(-2), k);
  out.sub_(k * eps);
}

std::string pytorch_batch_norm_backend(c10::Device device, at::ScalarType dtype, bool channels_last) {
  const auto weights = at::TensorOptions().device(device).dtype(at::kFloat);
  // Only dtypes, shapes and layout are read: empty tensors, no kernel runs.
  const auto layout = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const at::Tensor x = at::empty({2, 8, 4, 4}, weights.dtype(dtype).memory_format(layout));
  const at::Tensor weight = at::empty({8}, weights), bias = at::empty({8}, weights);
  const at::Tensor mean = at::empty({8}, weights), var = at::empty({8}, weights);
  switch (at::native::_select_batch_norm_backend(x, weight, bias, mean, var, /*training=*/true, 1e-5)) {
    case at::native::BatchNormBackend::Cudnn:
      return "cudnn";
    case at::native::BatchNormBackend::Miopen:
      return "miopen";
    default:
      return "native";
  }
}

std::string bf16_batch_norm_note(c10::Device device, bool channels_last) {
  const std::string bf16 = pytorch_batch_norm_backend(device, at::kBFloat16, channels_last);
  const std::string fp16 = pytorch_batch_norm_backend(device, at::kHalf, channels_last);
  if (bf16 == fp16) return "";
  auto kernels = [](const std::string& b) {
    return b == "cudnn" ? "cuDNN's kernels" : b == "miopen" ? "MIOpen's kernels" : "PyTorch's own kernels";
  };
  return std::string("train.amp: bf16: PyTorch gives batch norms in bf16 to ") + kernels(bf16) + " but in fp16 to " +
         kernels(fp16) +
         " (its batch-norm backend choice), so part of a gap to the same run in fp16 is that, not the dtype; "
         "a batch norm backend.compile fuses runs on cuDNN in both";
}

batch_norm_problem make_batch_norm_problem(const std::array<std::int64_t, 4>& nchw, at::ScalarType dtype, bool add,
                                           std::uint64_t seed, c10::Device device, double eps) {
  const auto [n, c, h, w] = nchw;
  TORCH_CHECK(n % 2 == 0 && n > 0, "make_batch_norm_problem: N must be even, got ", n);
  // Made on the CPU in double from a generator of its own: the global generators stay untouched.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto d = at::TensorOptions().dtype(at::kDouble);
  auto grid = [](const at::Tensor& t) { return t.mul(16).round().div(16); };
  const at::Tensor v = grid(at::rand({n / 2, c, h, w}, gen, d).mul(2).add(0.125));  // |x - mean| >= 0.125
  const at::Tensor s = at::randint(0, 2, {n / 2, c, h, w}, gen, d).mul(2).sub(1);
  const at::Tensor offset = grid(at::rand({1, c, 1, 1}, gen, d).sub(0.5).mul(2));
  const at::Tensor x = at::cat({offset + s * v, offset - s * v}, 0);
  const at::Tensor weight = at::rand({c}, gen, d).mul(1.5).add(0.5);
  // |bias| <= 0.01, well under weight * 0.125 * invstd (>= 0.5 * 0.125 / 2.2).
  const at::Tensor bias = at::rand({c}, gen, d).sub(0.5).mul(0.02);
  const at::Tensor dy = at::randn({n, c, h, w}, gen, d);
  const at::ScalarType param = dtype == at::kDouble ? at::kDouble : at::kFloat;
  auto place = [&](const at::Tensor& t) {
    return t.to(device, dtype).contiguous(at::MemoryFormat::ChannelsLast);
  };
  batch_norm_problem p;
  p.x = place(x);
  p.dy = place(dy);
  p.weight = weight.to(device, param);
  p.bias = bias.to(device, param);
  if (add) {
    const at::Tensor invstd = (x.var({0, 2, 3}, /*unbiased=*/false) + eps).rsqrt().view({1, -1, 1, 1});
    const at::Tensor pre = (x - offset) * invstd * weight.view({1, -1, 1, 1}) + bias.view({1, -1, 1, 1});
    const at::Tensor sign = at::randint(0, 2, {n, c, h, w}, gen, d).mul(2).sub(1);
    const at::Tensor target = sign * at::rand({n, c, h, w}, gen, d).mul(0.75).add(0.25);
    p.residual = place(target - pre);
  }
  return p;
}

}  // namespace trainbench
