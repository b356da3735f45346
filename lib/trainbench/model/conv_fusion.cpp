#include "trainbench/model/conv_fusion.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <variant>

#include "trainbench/model/fusion.hpp"

namespace trainbench {

namespace {

// float32 arithmetic for half-precision tensors, float64 for float64 ones.
at::ScalarType compute_type(const at::Tensor& t) { return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

at::Tensor per_channel(const at::Tensor& v, at::ScalarType type) { return v.to(type).reshape({1, -1, 1, 1}); }

at::Tensor channel_sum(const at::Tensor& t) { return t.sum({0, 2, 3}); }

at::Tensor activation(const at::Tensor& x, const at::Tensor& eq_scale, const at::Tensor& eq_bias) {
  const at::ScalarType ct = compute_type(x);
  return at::relu(x.to(ct) * per_channel(eq_scale, ct) + per_channel(eq_bias, ct)).to(x.scalar_type());
}

}  // namespace

bn_finalized bn_finalize_reference(const at::Tensor& sum, const at::Tensor& sq_sum, std::int64_t count,
                                   const at::Tensor& gamma, const at::Tensor& beta, double eps) {
  const at::ScalarType ct = compute_type(sum);
  const at::Tensor mean = sum.to(ct) / static_cast<double>(count);
  const at::Tensor var = (sq_sum.to(ct) / static_cast<double>(count) - mean * mean).clamp_min(0.0);
  const at::Tensor inv_std = at::rsqrt(var + eps);
  const at::Tensor eq_scale = gamma.to(ct) * inv_std;
  return {mean, inv_std, eq_scale, beta.to(ct) - mean * eq_scale};
}

conv_genstats sbr_conv_genstats_reference(const at::Tensor& x, const at::Tensor& eq_scale, const at::Tensor& eq_bias,
                                          const at::Tensor& w, conv_geometry g) {
  const at::Tensor y = at::conv2d(activation(x, eq_scale, eq_bias), w, {}, g.stride, g.padding);
  const at::Tensor y32 = y.to(compute_type(x));
  return {y, channel_sum(y32), channel_sum(y32 * y32)};
}

dgrad_dbn dgrad_drelu_dbn_weight_reference(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x,
                                           const at::Tensor& mean, const at::Tensor& inv_std, const at::Tensor& gamma,
                                           const at::Tensor& beta, conv_geometry g) {
  const at::ScalarType ct = compute_type(x);
  const at::Tensor da = std::get<0>(at::convolution_backward(dy, x, w, at::nullopt, {g.stride}, {g.padding}, {1}, false,
                                                             {0}, 1, {true, false, false}));
  const at::Tensor xhat = (x.to(ct) - per_channel(mean, ct)) * per_channel(inv_std, ct);
  const at::Tensor pre = xhat * per_channel(gamma, ct) + per_channel(beta, ct);
  const at::Tensor dz = at::where(pre > 0, da, at::zeros_like(da));
  const at::Tensor dz32 = dz.to(ct);
  const double m = static_cast<double>(x.numel() / x.size(1));
  const at::Tensor dgamma = channel_sum(dz32 * xhat);
  const at::Tensor dbeta = channel_sum(dz32);
  // dx = gamma * inv_std * (dz - dbeta / m - xhat * dgamma / m), written as eq_dy*dz + eq_x*x + eq_b.
  const at::Tensor eq_dy = gamma.to(ct) * inv_std.to(ct);
  const at::Tensor eq_x = -eq_dy * inv_std.to(ct) * dgamma / m;
  const at::Tensor eq_b = -eq_dy * dbeta / m - eq_x * mean.to(ct);
  return {dz, dgamma, dbeta, eq_dy, eq_x, eq_b};
}

at::Tensor sbr_wgrad_reference(const at::Tensor& x, const at::Tensor& eq_scale, const at::Tensor& eq_bias,
                               const at::Tensor& dy, const at::Tensor& w, conv_geometry g) {
  return std::get<1>(at::convolution_backward(dy, activation(x, eq_scale, eq_bias), w, at::nullopt, {g.stride},
                                              {g.padding}, {1}, false, {0}, 1, {false, true, false}));
}

at::Tensor dbn_apply_reference(const at::Tensor& dz, const at::Tensor& x, const at::Tensor& eq_dy,
                               const at::Tensor& eq_x, const at::Tensor& eq_b) {
  const at::ScalarType ct = compute_type(x);
  const at::Tensor dx = dz.to(ct) * per_channel(eq_dy, ct) + x.to(ct) * per_channel(eq_x, ct) + per_channel(eq_b, ct);
  return dx.to(x.scalar_type()).contiguous(x.suggest_memory_format());
}

namespace {

class reference_kernels final : public conv_fusion_kernels {
 public:
  bn_finalized finalize(const at::Tensor& sum, const at::Tensor& sq_sum, std::int64_t count, const at::Tensor& gamma,
                        const at::Tensor& beta, double eps) override {
    return bn_finalize_reference(sum, sq_sum, count, gamma, beta, eps);
  }
  bn_finalized statistics(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta, double eps) override {
    const at::Tensor xc = x.to(compute_type(x));
    return bn_finalize_reference(channel_sum(xc), channel_sum(xc * xc), x.numel() / x.size(1), gamma, beta, eps);
  }
  conv_genstats forward(const at::Tensor& x, const bn_finalized& f, const at::Tensor& w, conv_geometry g) override {
    return sbr_conv_genstats_reference(x, f.eq_scale, f.eq_bias, w, g);
  }
  conv_fusion_gradients backward(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x, const bn_finalized& f,
                                 const at::Tensor& gamma, const at::Tensor& beta, conv_geometry g) override {
    const dgrad_dbn d = dgrad_drelu_dbn_weight_reference(dy, w, x, f.mean, f.inv_std, gamma, beta, g);
    return {dbn_apply_reference(d.dz, x, d.eq_dy, d.eq_x, d.eq_b),
            sbr_wgrad_reference(x, f.eq_scale, f.eq_bias, dy, w, g), d.dgamma, d.dbeta};
  }
};

}  // namespace

std::shared_ptr<conv_fusion_kernels> reference_conv_fusion_kernels() {
  static const auto kernels = std::make_shared<reference_kernels>();  // stateless
  return kernels;
}

void update_running_statistics(torch::nn::BatchNorm2dImpl& bn, const bn_finalized& f, std::int64_t count) {
  TORCH_CHECK(count > 1, "batch norm: expected more than 1 value per channel when training, got ", count);
  const at::NoGradGuard no_grad;
  const double momentum = *bn.options.momentum();
  const double m = static_cast<double>(count);
  // Clamped: for a channel of near-zero variance, float rounding of inv_std^-2 can fall below eps.
  const at::Tensor unbiased = (f.inv_std.pow(-2) - bn.options.eps()).clamp_min(0.0) * (m / (m - 1.0));
  bn.running_mean.mul_(1.0 - momentum).add_(f.mean.to(bn.running_mean.scalar_type()), momentum);
  bn.running_var.mul_(1.0 - momentum).add_(unbiased.to(bn.running_var.scalar_type()), momentum);
  bn.num_batches_tracked.add_(1);
}

namespace {
// What the graphs are built for: one group, no bias, a square kernel, one stride and one integer
// padding for both axes, no dilation.
bool plain_square(const torch::nn::detail::ConvNdOptions<2>& o) {
  const auto* pad = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  return o.groups() == 1 && !o.bias() && pad && (*pad)->at(0) == (*pad)->at(1) &&
         (*o.kernel_size())[0] == (*o.kernel_size())[1] && (*o.stride())[0] == (*o.stride())[1] &&
         (*o.dilation())[0] == 1 && (*o.dilation())[1] == 1;
}
}  // namespace

std::vector<conv_fusion_site> conv_fusion_sites(resnet& model, const std::vector<std::int64_t>& input_shape) {
  std::map<const torch::nn::BatchNorm2dImpl*, std::vector<std::int64_t>> shapes;
  for (const batch_norm_site& s : batch_norm_sites(model, input_shape)) shapes[s.bn] = s.shape;
  std::vector<conv_fusion_site> out;  // a block comes before its children in named_modules, blocks in order
  for (const auto& item : model->named_modules()) {
    std::map<std::string, std::shared_ptr<torch::nn::Module>> children;
    for (const auto& c : item.value()->named_children()) children[c.key()] = c.value();
    for (const auto& [bn_name, conv_name] : {std::pair{"bn1", "conv2"}, std::pair{"bn2", "conv3"}}) {
      if (!children.count(bn_name) || !children.count(conv_name)) continue;
      auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(children[bn_name].get());
      auto* conv = dynamic_cast<torch::nn::Conv2dImpl*>(children[conv_name].get());
      // A batch norm without a momentum keeps a cumulative average: not what the finalize updates.
      if (!bn || !conv || !shapes.count(bn) || !bn->options.momentum() || !plain_square(conv->options)) continue;
      out.push_back({item.key() + "." + conv_name, bn, conv, shapes[bn]});
    }
  }
  return out;
}

conv_fusion_shape conv_fusion_problem(const conv_fusion_site& site, at::ScalarType dtype) {
  const auto& o = site.conv->options;
  conv_fusion_shape s;
  s.dtype = dtype;
  s.n = site.input[0];
  s.c = site.input[1];
  s.h = site.input[2];
  s.w = site.input[3];
  s.k = o.out_channels();
  s.r = (*o.kernel_size())[0];
  s.g = {(*o.stride())[0], std::get<torch::ExpandingArray<2>>(o.padding())->at(0)};
  s.eps = site.bn->options.eps();
  s.momentum = *site.bn->options.momentum();  // conv_fusion_sites keeps only batch norms with one
  return s;
}

std::vector<conv_fusion_group> conv_fusion_groups(const std::vector<conv_fusion_site>& sites, at::ScalarType dtype) {
  using key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t, double, double>;
  std::map<key, std::size_t> index;
  std::vector<conv_fusion_group> groups;
  for (const conv_fusion_site& site : sites) {
    const conv_fusion_shape s = conv_fusion_problem(site, dtype);
    const auto [it, added] = index.emplace(key{s.c, s.h, s.w, s.k, s.r, s.g.stride, s.g.padding, s.eps, s.momentum}, groups.size());
    if (added) groups.push_back({s, site.conv, {}});
    groups[it->second].layers.push_back(site.name);
  }
  const auto work = [](const conv_fusion_group& g) {
    const conv_fusion_shape& s = g.shape;
    return static_cast<double>(g.layers.size()) * s.n * s.k * s.c * s.r * s.r * s.out_h() * s.out_w();
  };
  std::stable_sort(groups.begin(), groups.end(),
                   [&](const conv_fusion_group& a, const conv_fusion_group& b) { return work(a) > work(b); });
  return groups;
}

}  // namespace trainbench
