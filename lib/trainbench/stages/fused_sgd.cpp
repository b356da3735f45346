#include "trainbench/stages/fused_sgd.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_fused_sgd.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros_like.h>

#include <optional>

#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

// The same elements in the same memory order: sizes equal, and strides equal in every dimension
// longer than one (a dimension of size 1 has no order; ATen's own check of the fused kernels
// skips it too). A 1x1 convolution's channels_last gradient often differs from its weight there.
bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  for (std::int64_t d = 0; d < a.dim(); ++d)
    if (a.size(d) > 1 && a.stride(d) != b.stride(d)) return false;
  return true;
}

}  // namespace

fused_sgd::fused_sgd(std::vector<at::Tensor> params, const optimizer_config& cfg)
    : params_(std::move(params)), cfg_(cfg) {
  TB_ASSERT(!params_.empty(), "fused SGD needs at least one parameter");
  at::NoGradGuard no_grad;
  // The kernel takes momentum buffers only with momentum > 0 (and asserts momentum == 0 without).
  if (cfg_.momentum != 0)
    for (const auto& p : params_) buffers_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
}

std::vector<at::Tensor> fused_sgd::grads() const {
  std::vector<at::Tensor> out;
  out.reserve(params_.size());
  for (const auto& p : params_)
    if (p.grad().defined()) out.push_back(p.grad());
  return out;
}

void fused_sgd::zero_grad() {
  for (auto& p : params_) p.mutable_grad().reset();
}

void fused_sgd::step(const at::Tensor& grad_scale, const at::Tensor& found_inf) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> params, buffers, grads;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor g = params_[i].grad();
    if (!g.defined()) continue;  // as torch.optim.SGD: left alone, the others still step
    // The kernels walk parameter, gradient and buffer as flat arrays of the same layout: the CPU
    // kernel computes garbage for a contiguous gradient of a channels_last parameter, and the
    // CUDA kernel refuses it. Autograd makes gradients in their parameter's layout; this keeps
    // a gradient set by other means correct too.
    if (!same_layout(g, params_[i])) {
      g = at::empty_like(params_[i]).copy_(g);
      params_[i].mutable_grad() = g;
    }
    params.push_back(params_[i]);
    if (!buffers_.empty()) buffers.push_back(buffers_[i]);
    grads.push_back(std::move(g));
  }
  if (params.empty()) return;
  const auto optional = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
  // is_first_step false: the buffers start at zero, so momentum * 0 + grad is the first step's
  // buffer (torch.optim.SGD's clone of the gradient) without a host decision.
  at::_fused_sgd_(params, grads, buffers, cfg_.weight_decay, cfg_.momentum, cfg_.lr, /*dampening=*/0.0,
                  /*nesterov=*/false, /*maximize=*/false, /*is_first_step=*/false, optional(grad_scale),
                  optional(found_inf));
}

}  // namespace trainbench
