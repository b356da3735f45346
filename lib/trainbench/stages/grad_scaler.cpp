#include "trainbench/stages/grad_scaler.hpp"

#include <ATen/ATen.h>

namespace trainbench {

grad_scaler::grad_scaler(c10::Device device, scaler_options options) : options_(options) {
  auto f = at::TensorOptions().device(device).dtype(at::kFloat);
  scale_ = at::full({1}, options_.init_scale, f);
  inv_scale_ = at::empty({1}, f);
  growth_tracker_ = at::zeros({1}, f.dtype(at::kInt));
  found_inf_ = at::zeros({1}, f);
  keep_ = at::ones({1}, f);
  skipped_ = at::zeros({1}, f);
}

const at::Tensor& grad_scaler::unscale(const std::vector<at::Tensor>& grads) {
  at::NoGradGuard no_grad;
  found_inf_.zero_();
  at::reciprocal_out(inv_scale_, scale_);
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale_);
  keep_.fill_(1.0).sub_(found_inf_);
  return keep_;
}

void grad_scaler::update() {
  at::NoGradGuard no_grad;
  skipped_.add_(found_inf_);
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                         options_.growth_interval);
}

}  // namespace trainbench
