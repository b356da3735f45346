#include "trainbench/stages/train_step.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <optional>

#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/amp.hpp"
#include "trainbench/stages/grad_scaler.hpp"
#include "trainbench/stages/optimizer.hpp"

namespace trainbench {

at::ScalarType amp_dtype(amp_mode mode) { return mode == amp_mode::bf16 ? at::kBFloat16 : at::kHalf; }

namespace {

class eager_step final : public train_step {
 public:
  eager_step(resnet model, const step_options& o)
      : model_(std::move(model)),
        options_(o),
        optimizer_(make_step_optimizer(model_->parameters(), o.optimizer, o.fused_sgd)) {
    if (o.scaler) scaler_.emplace(o.device);
  }

  void forward(const device_batch& batch) override {
    autocast_scope amp(options_.device.type(), amp_dtype(options_.amp), options_.amp != amp_mode::off);
    at::Tensor logits = model_->forward(batch.images);
    loss_ = at::cross_entropy_loss(logits, batch.labels);
    if (scaler_) scaler_->see(loss_, batch.images);
  }

  void backward() override {
    at::Tensor loss = options_.accumulation > 1 ? loss_ / options_.accumulation : loss_;
    if (scaler_) loss = scaler_->scale(loss);
    loss.backward();
  }

  void optimizer_step() override {
    if (++micro_batches_ % options_.accumulation != 0) return;  // accumulate until the k-th
    if (scaler_) {
      optimizer_->step_scaled(*scaler_);
      scaler_->update();
    } else {
      optimizer_->step();
    }
    optimizer_->zero_grad();
  }

  at::Tensor last_loss() const override { return loss_.detach(); }
  const grad_scaler* scaler() const override { return scaler_ ? &*scaler_ : nullptr; }
  const resnet& model() const override { return model_; }
  std::string describe() const override { return "eager, " + optimizer_->describe(); }

 private:
  resnet model_;
  step_options options_;
  std::unique_ptr<step_optimizer> optimizer_;
  std::optional<grad_scaler> scaler_;
  at::Tensor loss_;
  std::int64_t micro_batches_ = 0;
};

}  // namespace

std::unique_ptr<train_step> make_eager_step(resnet model, const step_options& options) {
  return std::make_unique<eager_step>(std::move(model), options);
}

}  // namespace trainbench
