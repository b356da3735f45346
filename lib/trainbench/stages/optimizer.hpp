#pragma once
// SGD with momentum and weight decay, same numbers as torch.optim.SGD (dampening 0, not Nesterov).
// Written here rather than using torch::optim::SGD so that it is graph-safe (no host decision
// about momentum buffers: they start at zero, which gives buf = grad on the first step exactly
// like PyTorch), and so an fp16 step with inf/nan gradients can be skipped on the device,
// without a host sync.
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"

namespace trainbench {

class sgd {
 public:
  sgd(std::vector<at::Tensor> params, const optimizer_config& cfg);
  // keep: optional 0-dim float tensor on the parameters' device, 1 to apply the step, 0 to skip
  // it (parameters and momentum buffers then stay bit-identical).
  void step(const at::Tensor& keep = {});
  void zero_grad();  // set to none, as PyTorch 2.x does by default
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<at::Tensor>& momentum_buffers() const { return buffers_; }
  std::vector<at::Tensor> grads() const;  // the defined ones: what a loss scaler unscales

 private:
  // The parameters that have a gradient this step, with their buffers and gradients.
  struct step_lists {
    std::vector<at::Tensor> params, buffers, grads;
  };
  void step_foreach(const step_lists& lists, const at::Tensor& keep);
  void step_loop(const step_lists& lists, const at::Tensor& keep);
  std::vector<at::Tensor> params_, buffers_;
  optimizer_config cfg_;
};

class grad_scaler;

// What a training step needs of its optimizer, whichever runs: the eager `sgd` (per-parameter or
// foreach) or backend.compile's `fused_sgd`. The step chooses once, when it is built.
class step_optimizer {
 public:
  virtual ~step_optimizer() = default;
  virtual void step() = 0;
  // An fp16 step: unscale the gradients, skip the whole update where one is inf/nan (on the
  // device, no host sync), step. The caller updates the scaler afterwards.
  virtual void step_scaled(grad_scaler& scaler) = 0;
  virtual void zero_grad() = 0;
  // Tensors the step changes in place beside the parameters (momentum buffers).
  virtual std::vector<at::Tensor> state() const = 0;
  virtual std::string describe() const = 0;
};

// fused: at::_fused_sgd_ (backend.compile); otherwise `sgd`, per-parameter or foreach as cfg says.
std::unique_ptr<step_optimizer> make_step_optimizer(std::vector<at::Tensor> params, const optimizer_config& cfg,
                                                    bool fused);

}  // namespace trainbench
