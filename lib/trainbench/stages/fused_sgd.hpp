#pragma once
// backend.compile's optimizer: SGD with momentum and weight decay as ATen's fused multi-tensor
// kernel (at::_fused_sgd_, what torch.optim.SGD(fused=True) calls), one launch for every
// parameter on CUDA. Same update as the eager `sgd` (torch.optim.SGD, dampening 0, not Nesterov).
// Graph-safe: the learning rate is a double, as torch.optim.SGD(fused=True) passes its float lr
// (the kernel then updates with it unrounded; a captured graph keeps it, and the run's learning
// rate never changes), the momentum buffers start at zero (so the first step needs no host
// decision), and an fp16 step is unscaled and skipped inside the kernel (grad_scale, found_inf)
// instead of by a host branch.
#include <ATen/core/Tensor.h>

#include <vector>

#include "trainbench/config/profile.hpp"

namespace trainbench {

class fused_sgd {
 public:
  fused_sgd(std::vector<at::Tensor> params, const optimizer_config& cfg);
  // grad_scale, found_inf: optional 0-dim float tensors on the parameters' device, as
  // torch.amp.GradScaler hands them to a fused optimizer: the kernel divides each gradient by
  // grad_scale (writing the unscaled gradient back) and leaves every parameter and momentum
  // buffer untouched where found_inf is 1.
  void step(const at::Tensor& grad_scale = {}, const at::Tensor& found_inf = {});
  void zero_grad();  // set to none, as PyTorch 2.x does by default
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<at::Tensor>& momentum_buffers() const { return buffers_; }
  std::vector<at::Tensor> grads() const;  // the defined ones

 private:
  std::vector<at::Tensor> params_, buffers_;
  optimizer_config cfg_;
};

}  // namespace trainbench
