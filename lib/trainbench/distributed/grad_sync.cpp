#include "trainbench/distributed/grad_sync.hpp"

#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "trainbench/distributed/c10d_state.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

struct grad_bucket {
  std::vector<std::size_t> params;
  std::vector<std::int64_t> offsets;  // in elements, within flat
  at::Tensor flat;
  std::vector<at::Tensor> as_list;  // {flat}: the collectives take a list, made once
  std::size_t pending = 0;          // gradients not yet copied in this step
  c10::intrusive_ptr<c10d::Work> work;
};

namespace {

class ready_hook final : public torch::autograd::PostAccumulateGradHook {
 public:
  ready_hook(grad_sync& sync, std::size_t index) : sync_(sync), index_(index) {}
  void operator()(const torch::autograd::Variable&) override { sync_.on_gradient_ready(index_); }

 private:
  grad_sync& sync_;
  std::size_t index_;
};

}  // namespace

grad_sync::grad_sync(std::vector<at::Tensor> params, process_group& group, double bucket_mb, int accumulation)
    : params_(std::move(params)),
      group_(group),
      accumulation_(accumulation),
      world_(at::scalar_tensor(group.world(), at::kFloat)),
      bucket_of_(params_.size()),
      slot_of_(params_.size()) {
  const auto cap = static_cast<std::int64_t>(bucket_mb * 1024 * 1024);
  std::int64_t bytes = cap;
  // Reverse order: the last layers' gradients are ready first. A bucket closes once it holds
  // at least `cap` bytes (DDP's rule, so the buckets come out the same as its rebuilt ones).
  for (std::size_t i = params_.size(); i-- > 0;) {
    const at::Tensor& p = params_[i];
    if (bytes >= cap) {
      buckets_.push_back(std::make_unique<grad_bucket>());
      bytes = 0;
    }
    grad_bucket& b = *buckets_.back();
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + params_[b.params.back()].numel());
    b.params.push_back(i);
    bucket_of_[i] = buckets_.size() - 1;
    slot_of_[i] = b.params.size() - 1;
    bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
  }
  for (auto& b : buckets_) {
    const at::Tensor& last = params_[b->params.back()];
    b->flat = at::empty({b->offsets.back() + last.numel()}, last.options());
    b->as_list = {b->flat};
  }
  for (std::size_t i = 0; i < params_.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<ready_hook>(*this, i));
}

grad_sync::~grad_sync() {
  for (auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void grad_sync::begin_backward() {
  syncing_ = ++backward_calls_ % accumulation_ == 0;
  if (!syncing_) return;
  in_backward_ = true;
  next_launch_ = 0;
  launched_ = 0;
  launched_in_backward_ = 0;
  for (auto& b : buckets_) b->pending = b->params.size();
}

void grad_sync::on_gradient_ready(std::size_t param) {
  if (!syncing_ || !in_backward_) return;
  grad_bucket& b = *buckets_[bucket_of_[param]];
  const at::Tensor& p = params_[param];
  // The averaging is folded into the copy (one pass): an all-reduce SUM of grad / world.
  at::Tensor slot_view = b.flat.narrow(0, b.offsets[slot_of_[param]], p.numel()).view(p.sizes());
  at::div_out(slot_view, p.grad(), world_);
  if (--b.pending == 0) launch_ready();
}

void grad_sync::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) launch(*buckets_[next_launch_++]);
}

void grad_sync::launch(grad_bucket& b) {
  if (launched_++ == 0) first_launch_ = std::chrono::steady_clock::now();
  if (in_backward_) ++launched_in_backward_;
  try {
    b.work = group_.state().backend->allreduce(b.as_list);
  } catch (const std::exception&) {
    group_.fail("starting the all-reduce of a gradient bucket");
  }
}

bool grad_sync::finish() {
  if (!syncing_) return false;
  in_backward_ = false;
  // A parameter that got no gradient would hold its bucket back forever; send it as zero.
  for (auto& b : buckets_) {
    for (std::size_t s = 0; s < b->params.size() && b->pending; ++s)
      if (!params_[b->params[s]].grad().defined()) {
        b->flat.narrow(0, b->offsets[s], params_[b->params[s]].numel()).zero_();
        --b->pending;
      }
  }
  for (auto& b : buckets_) TB_ASSERT(b->pending == 0, "a bucket still waits for gradients after backward");
  launch_ready();
  for (auto& b : buckets_) {
    group_.wait(*b->work, "the all-reduce of the gradients");
    b->work.reset();
    for (std::size_t s = 0; s < b->params.size(); ++s) {
      at::Tensor& p = params_[b->params[s]];
      at::Tensor averaged = b->flat.narrow(0, b->offsets[s], p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(averaged);
      else
        p.mutable_grad() = averaged.clone();
    }
  }
  const auto done = std::chrono::steady_clock::now();
  timing_.launch_to_done_s = std::chrono::duration<double>(done - first_launch_).count();
  timing_.launched_in_backward = static_cast<double>(launched_in_backward_) / static_cast<double>(buckets_.size());
  return true;
}

std::vector<std::int64_t> grad_sync::bucket_bytes() const {
  std::vector<std::int64_t> out;
  for (const auto& b : buckets_) out.push_back(b->flat.numel() * static_cast<std::int64_t>(b->flat.element_size()));
  return out;
}

}  // namespace trainbench
