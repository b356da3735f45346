#include "trainbench/stages/grad_scaler.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>
#include <ATen/ops/full.h>
#include <ATen/ops/reciprocal.h>

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
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
}

}  // namespace trainbench
