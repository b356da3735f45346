#pragma once
// The compute half of a batch. The runner calls forward, backward and optimizer_step and times
// each; a fused step (a CUDA graph) does all the work in forward and says so.
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/stages/batch.hpp"
#include "trainbench/stages/grad_scaler.hpp"

namespace trainbench {

// Declared only: model/resnet.hpp brings LibTorch's nn headers (about 12 s of parsing a file),
// which most users of a step never touch.
class resnet;

class train_step {
 public:
  virtual ~train_step() = default;
  virtual void forward(const device_batch& batch) = 0;
  virtual void backward() = 0;
  virtual void optimizer_step() = 0;
  virtual bool fused() const { return false; }
  // One-time work that must not land in a measured window (a CUDA graph's capture). The runner
  // calls it before the first batch, whatever measure.warmup_batches says.
  virtual void prepare() {}
  // Device scalars, read by the runner only outside measured windows.
  virtual at::Tensor last_loss() const = 0;
  // fp16 loss scaling's state and counts (stages/grad_scaler.hpp); null without it.
  virtual const grad_scaler* scaler() const { return nullptr; }
  at::Tensor skipped_steps() const { return scaler() ? scaler()->skipped_steps() : at::Tensor(); }
  at::Tensor loss_scale() const { return scaler() ? scaler()->scale_tensor() : at::Tensor(); }
  virtual std::string describe() const = 0;
  virtual const resnet& model() const = 0;
  // A CUDA graph's static inputs, which the transfer stage may write into directly.
  virtual std::pair<at::Tensor, at::Tensor> static_inputs() const { return {}; }
};

struct step_options {
  c10::Device device = c10::kCPU;
  amp_mode amp = amp_mode::off;
  bool scaler = false;
  int accumulation = 1;
  optimizer_config optimizer;
  bool fused_sgd = false;  // backend.compile: at::_fused_sgd_ instead of `sgd`
  // The dtype of the batches the step is given (a graph step's static input has it): float, or
  // autocast's dtype where the device decode writes that directly.
  at::ScalarType input_dtype = at::kFloat;
};

std::unique_ptr<train_step> make_eager_step(resnet model, const step_options& options);

at::ScalarType amp_dtype(amp_mode mode);

}  // namespace trainbench
