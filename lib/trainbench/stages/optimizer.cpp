#include "trainbench/stages/optimizer.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/generated/variable_factories.h>

namespace trainbench {

sgd::sgd(std::vector<at::Tensor> params, const optimizer_config& cfg) : params_(std::move(params)), cfg_(cfg) {
  if (cfg_.momentum != 0) {
    at::NoGradGuard no_grad;
    for (const auto& p : params_) buffers_.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
  }
}

std::vector<at::Tensor> sgd::grads() const {
  std::vector<at::Tensor> out;
  out.reserve(params_.size());
  for (const auto& p : params_) out.push_back(p.grad());
  return out;
}

void sgd::zero_grad() {
  for (auto& p : params_) p.mutable_grad().reset();
}

void sgd::step(const at::Tensor& keep) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> grads = this->grads();
  for (const auto& g : grads)
    if (!g.defined()) return;  // nothing flowed back (first step of an accumulation cycle)
  if (keep.defined()) {
    // A skipped step may carry inf/nan gradients; 0 * inf is nan, so clear them first.
    for (auto& g : grads) g.nan_to_num_(0.0, 0.0, 0.0);
  }
  if (cfg_.foreach)
    step_foreach(grads, keep);
  else
    step_loop(grads, keep);
}

// buf <- buf + keep * ((m - 1) * buf + g)  == m * buf + g when keep = 1, unchanged when keep = 0
// p   <- p - lr * keep * buf
void sgd::step_loop(const std::vector<at::Tensor>& grads, const at::Tensor& keep) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor d = grads[i];
    if (cfg_.weight_decay != 0) d = d.add(params_[i], cfg_.weight_decay);
    if (!buffers_.empty()) {
      at::Tensor& buf = buffers_[i];
      if (keep.defined()) {
        buf.add_(buf.mul(cfg_.momentum - 1).add_(d).mul_(keep));
      } else {
        buf.mul_(cfg_.momentum).add_(d);
      }
      d = buf;
    } else if (keep.defined()) {
      d = d.mul(keep);
    }
    params_[i].add_(d, -cfg_.lr);
  }
}

void sgd::step_foreach(const std::vector<at::Tensor>& grads, const at::Tensor& keep) {
  std::vector<at::Tensor> d = grads;
  if (cfg_.weight_decay != 0) d = at::_foreach_add(grads, params_, cfg_.weight_decay);
  if (!buffers_.empty()) {
    if (keep.defined()) {
      auto delta = at::_foreach_mul(buffers_, cfg_.momentum - 1);
      at::_foreach_add_(delta, d);
      at::_foreach_mul_(delta, keep);
      at::_foreach_add_(buffers_, delta);
    } else {
      at::_foreach_mul_(buffers_, cfg_.momentum);
      at::_foreach_add_(buffers_, d);
    }
    d = buffers_;
  } else if (keep.defined()) {
    d = at::_foreach_mul(d, keep);
  }
  at::_foreach_add_(params_, d, -cfg_.lr);
}

}  // namespace trainbench
