#include "trainbench/stages/grad_scaler.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/full.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

namespace trainbench {

// 0-dim, as torch.amp.GradScaler makes them (torch.full((), ...)): the foreach ops' tensor-scalar
// overloads reject a one-element 1-D tensor.
grad_scaler::grad_scaler(c10::Device device, scaler_options options) : options_(options) {
  auto f = at::TensorOptions().device(device).dtype(at::kFloat);
  scale_ = at::full({}, options_.init_scale, f);
  inv_scale_ = at::full({}, 1.0, f);
  unit_ = at::full({}, 1.0, f);
  growth_tracker_ = at::full({}, 0, f.dtype(at::kInt));
  found_inf_ = at::full({}, 0.0, f);
  keep_ = at::full({}, 1.0, f);
  skipped_ = at::full({}, 0.0, f);
  causes_ = at::zeros({3}, f);
  seen_ = at::zeros({2}, f);
  input_abs_max_ = at::full({}, 0.0, f);
}

namespace {

// A 1-D view of a dense tensor: aminmax without a dim reduces t.contiguous(), which would copy a
// channels_last batch whole first.
at::Tensor flat(const at::Tensor& t) {
  if (t.is_contiguous()) return t.view(-1);
  if (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)) return t.permute({0, 2, 3, 1}).reshape(-1);
  return t;
}

}  // namespace

// About ten small kernels: one pass over the batch, then scalars. The unscale kernel with a
// factor of 1 sets its flag only on inf or nan, so it ORs "not finite" into seen_ in one launch.
void grad_scaler::see(const at::Tensor& loss, const at::Tensor& images) {
  at::NoGradGuard no_grad;
  const auto [lo, hi] = at::aminmax(flat(images));
  const at::Tensor range = at::stack({lo, hi}).to(at::kFloat);  // nan and inf come through
  at::maximum_out(input_abs_max_, input_abs_max_, range.abs().amax());
  at::Tensor input_bad = seen_[0], loss_bad = seen_[1];  // views: the kernel writes into seen_
  at::_amp_foreach_non_finite_check_and_unscale_({range}, input_bad, unit_);
  at::_amp_foreach_non_finite_check_and_unscale_({loss.detach().to(at::kFloat, false, true).reshape({1})}, loss_bad,
                                                 unit_);
}

at::Tensor grad_scaler::scale(const at::Tensor& loss) const { return loss.mul(scale_); }

const at::Tensor& grad_scaler::unscale(const std::vector<at::Tensor>& grads) {
  at::NoGradGuard no_grad;
  found_inf_.zero_();
  at::reciprocal_out(inv_scale_, scale_);
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale_);
  keep_.fill_(1.0).sub_(found_inf_);
  return keep_;
}

// GradScaler._check_inf_per_device: the unscale kernel with an inverse scale of 1 (the
// gradients keep their values), for its found_inf.
const at::Tensor& grad_scaler::find_inf(const std::vector<at::Tensor>& grads) {
  at::NoGradGuard no_grad;
  found_inf_.zero_();
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, unit_);
  keep_.fill_(1.0).sub_(found_inf_);
  return found_inf_;
}

void grad_scaler::update() {
  at::NoGradGuard no_grad;
  skipped_.add_(found_inf_);
  // One-hot over the causes, in their order: the input first, then the forward pass.
  const at::Tensor input = seen_[0], forward = seen_[1] * (1 - input);
  causes_.add_(at::stack({input, forward, 1 - input - forward}).mul_(found_inf_));
  seen_.zero_();
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
}

}  // namespace trainbench
