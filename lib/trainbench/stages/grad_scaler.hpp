#pragma once
// Dynamic loss scaling with torch.amp.GradScaler's defaults and update rule, kept entirely on the
// device: the found-inf flag becomes a 0/1 "keep" factor for the optimizer instead of a host branch,
// so an fp16 step needs no sync and can live inside a CUDA graph.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace trainbench {

struct scaler_options {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
};

class grad_scaler {
 public:
  grad_scaler(c10::Device device, scaler_options options = {});
  at::Tensor scale(const at::Tensor& loss) const;
  // Unscales in place and returns keep = 1 - found_inf: a 0-dim float tensor on the device, the
  // shape the foreach ops take as a tensor scalar.
  const at::Tensor& unscale(const std::vector<at::Tensor>& grads);
  // For a fused optimizer that unscales and skips in its own kernel: only checks the gradients
  // for inf/nan (leaving them scaled) and returns found_inf, 0 or 1, as torch.amp.GradScaler does
  // before it hands scale and found_inf to optimizer.step(). keep is updated too.
  const at::Tensor& find_inf(const std::vector<at::Tensor>& grads);
  const at::Tensor& found_inf() const { return found_inf_; }
  // Looks at a micro-batch's input and loss before backward, for the causes update() counts.
  // One pass over the batch (aminmax) and a few scalar ops, on the device: no sync.
  void see(const at::Tensor& loss, const at::Tensor& images);
  // Grows or backs off the scale and counts a skipped step, as GradScaler.update() does, and why
  // it was skipped: the input batch held inf or nan (the input pipeline); else the loss was inf or
  // nan (the forward pass overflowed: weights or activations); else only the scaled gradients
  // overflowed at the scale of the time (the backward pass; early in a run, the scale backing
  // off from its start). Micro-batches since the last update count together.
  void update();
  const at::Tensor& scale_tensor() const { return scale_; }
  const at::Tensor& skipped_steps() const { return skipped_; }
  // float [3]: skipped steps by cause: input, forward, backward (report/run_result.hpp's skip_cause_names).
  const at::Tensor& skip_causes() const { return causes_; }
  // The largest |input| seen so far (float, 0-dim): nan once a batch held nan.
  const at::Tensor& input_abs_max() const { return input_abs_max_; }
  // What a step changes (scale, growth tracker, skip counts, what see() keeps): saved and
  // restored around the eager warm-up of a graph capture.
  std::vector<at::Tensor> state() const { return {scale_, growth_tracker_, skipped_, causes_, seen_, input_abs_max_}; }

 private:
  scaler_options options_;
  at::Tensor scale_, inv_scale_, unit_, growth_tracker_, found_inf_, keep_, skipped_;
  at::Tensor causes_;         // float [3]: input, forward, backward
  at::Tensor seen_;           // float [2]: since the last update, an input held inf/nan; a loss was inf/nan
  at::Tensor input_abs_max_;  // float, 0-dim
};

}  // namespace trainbench
