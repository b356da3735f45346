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
  // Grows or backs off the scale and counts a skipped step, as GradScaler.update() does.
  void update();
  const at::Tensor& scale_tensor() const { return scale_; }
  const at::Tensor& skipped_steps() const { return skipped_; }
  // What a step changes (scale, growth tracker, skip count): saved and restored around the
  // eager warm-up of a graph capture.
  std::vector<at::Tensor> state() const { return {scale_, growth_tracker_, skipped_}; }

 private:
  scaler_options options_;
  at::Tensor scale_, inv_scale_, unit_, growth_tracker_, found_inf_, keep_, skipped_;
};

}  // namespace trainbench
