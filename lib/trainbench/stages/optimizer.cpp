#include "trainbench/stages/optimizer.hpp"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/lerp.h>
#include <ATen/ops/zeros_like.h>

#include "trainbench/stages/fused_sgd.hpp"
#include "trainbench/stages/grad_scaler.hpp"

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
  for (const auto& p : params_)
    if (p.grad().defined()) out.push_back(p.grad());  // the unscale kernel rejects undefined ones
  return out;
}

void sgd::zero_grad() {
  for (auto& p : params_) p.mutable_grad().reset();
}

void sgd::step(const at::Tensor& keep) {
  at::NoGradGuard no_grad;
  // As torch.optim.SGD: a parameter without a gradient is left alone, the others still step.
  step_lists lists;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    at::Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    lists.params.push_back(params_[i]);
    if (!buffers_.empty()) lists.buffers.push_back(buffers_[i]);
    lists.grads.push_back(std::move(g));
  }
  if (lists.params.empty()) return;  // nothing flowed back (first step of an accumulation cycle)
  if (keep.defined()) {
    // A skipped step may carry inf/nan gradients; 0 * inf is nan, so clear them first.
    for (auto& g : lists.grads) g.nan_to_num_(0.0, 0.0, 0.0);
  }
  if (cfg_.foreach)
    step_foreach(lists, keep);
  else
    step_loop(lists, keep);
}

// With keep (0 or 1, on the device), as torch.optim.SGD when keep = 1 and unchanged when 0:
//   buf <- lerp(buf, buf * m + d, keep)   the new buffer rounds exactly as PyTorch's
//                                         buf.mul_(m).add_(d); lerp with weight 0 or 1 returns
//                                         one end bit for bit (finite values; nan_to_num above)
//   p   <- p - lr * (keep * buf)          unchanged when keep = 0, as torch.amp skips step()
// A blend such as buf + keep * ((m - 1) * buf + d) equals the same value in exact arithmetic
// but rounds three times: about a third of float32 elements drift from PyTorch's.
void sgd::step_loop(const step_lists& l, const at::Tensor& keep) {
  for (std::size_t i = 0; i < l.params.size(); ++i) {
    at::Tensor d = l.grads[i];
    if (cfg_.weight_decay != 0) d = d.add(l.params[i], cfg_.weight_decay);
    if (!l.buffers.empty()) {
      const at::Tensor& buf = l.buffers[i];
      if (keep.defined()) {
        buf.lerp_(buf.mul(cfg_.momentum).add_(d), keep);
      } else {
        buf.mul_(cfg_.momentum).add_(d);
      }
      d = buf;
    }
    if (keep.defined()) d = d.mul(keep);
    l.params[i].add_(d, -cfg_.lr);
  }
}

void sgd::step_foreach(const step_lists& l, const at::Tensor& keep) {
  std::vector<at::Tensor> d = l.grads;
  if (cfg_.weight_decay != 0) d = at::_foreach_add(l.grads, l.params, cfg_.weight_decay);
  if (!l.buffers.empty()) {
    if (keep.defined()) {
      auto fresh = at::_foreach_mul(l.buffers, cfg_.momentum);
      at::_foreach_add_(fresh, d);
      at::_foreach_lerp_(l.buffers, fresh, std::vector<at::Tensor>(l.buffers.size(), keep));
    } else {
      at::_foreach_mul_(l.buffers, cfg_.momentum);
      at::_foreach_add_(l.buffers, d);
    }
    d = l.buffers;
  }
  if (keep.defined()) d = at::_foreach_mul(d, keep);
  at::_foreach_add_(l.params, d, -cfg_.lr);
}

namespace {

class eager_sgd final : public step_optimizer {
 public:
  eager_sgd(std::vector<at::Tensor> params, const optimizer_config& cfg)
      : sgd_(std::move(params), cfg), foreach_(cfg.foreach) {}
  void step() override { sgd_.step(); }
  void step_scaled(grad_scaler& scaler) override { sgd_.step(scaler.unscale(sgd_.grads())); }
  void zero_grad() override { sgd_.zero_grad(); }
  std::vector<at::Tensor> state() const override { return sgd_.momentum_buffers(); }
  std::string describe() const override { return foreach_ ? "foreach SGD" : "per-parameter SGD"; }

 private:
  sgd sgd_;
  bool foreach_;
};

// As torch.amp.GradScaler.step() with a fused optimizer: found_inf from a check that leaves the
// gradients scaled, then the kernel unscales by the scale itself and skips on found_inf.
class fused_step_sgd final : public step_optimizer {
 public:
  fused_step_sgd(std::vector<at::Tensor> params, const optimizer_config& cfg) : sgd_(std::move(params), cfg) {}
  void step() override { sgd_.step(); }
  void step_scaled(grad_scaler& scaler) override {
    const at::Tensor& found_inf = scaler.find_inf(sgd_.grads());
    sgd_.step(scaler.scale_tensor(), found_inf);
  }
  void zero_grad() override { sgd_.zero_grad(); }
  std::vector<at::Tensor> state() const override { return sgd_.momentum_buffers(); }
  std::string describe() const override { return "fused SGD (at::_fused_sgd_)"; }

 private:
  fused_sgd sgd_;
};

}  // namespace

std::unique_ptr<step_optimizer> make_step_optimizer(std::vector<at::Tensor> params, const optimizer_config& cfg,
                                                    bool fused) {
  if (fused) return std::make_unique<fused_step_sgd>(std::move(params), cfg);
  return std::make_unique<eager_sgd>(std::move(params), cfg);
}

}  // namespace trainbench
