#include "trainbench/stages/transfer.hpp"

#include <deque>

namespace trainbench {
namespace {

class passthrough_transfer final : public transfer_stage {
 public:
  void submit(const host_batch& batch, batch_loader& loader) override {
    loader_ = &loader;
    pending_.push_back(&batch);
  }
  device_batch take() override {
    current_ = pending_.front();
    pending_.pop_front();
    return {view(current_->images, current_->count), view(current_->labels, current_->count), current_->index,
            current_->count};
  }
  void step_done() override {
    if (current_) loader_->release(*current_);
    current_ = nullptr;
  }
  std::string describe() const override { return "none (CPU device: the step reads the loader's buffer)"; }

 private:
  static at::Tensor view(const at::Tensor& t, std::int64_t count) {
    return count == t.size(0) ? t : t.narrow(0, 0, count);
  }
  batch_loader* loader_ = nullptr;
  std::deque<const host_batch*> pending_;
  const host_batch* current_ = nullptr;
};

}  // namespace

std::unique_ptr<transfer_stage> make_passthrough_transfer() { return std::make_unique<passthrough_transfer>(); }

}  // namespace trainbench
