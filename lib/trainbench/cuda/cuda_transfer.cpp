// Host-to-device copies: blocking, non_blocking from pinned memory, or a copy stream feeding a
// ring of device buffers. Ordering is by events only; nothing here blocks the host on the hot path.
#include "trainbench/cuda/cuda_transfer.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <deque>
#include <optional>

#include "trainbench/cuda/cuda_stages.hpp"

namespace trainbench {
namespace {

at::Tensor rows(const at::Tensor& t, std::int64_t count) { return count == t.size(0) ? t : t.narrow(0, 0, count); }

class cuda_transfer final : public transfer_stage, public copy_lane {
 public:
  cuda_transfer(c10::Device device, const transfer_config& cfg, bool pinned)
      : device_(device), pinned_(pinned), non_blocking_((cfg.non_blocking || cfg.copy_stream) && pinned) {
    if (cfg.copy_stream) copy_stream_ = c10::cuda::getStreamFromPool(false, device.index());
    depth_ = cfg.copy_stream ? cfg.depth : 1;
    ready_ = std::vector<at::cuda::CUDAEvent>(static_cast<std::size_t>(depth_));
    free_ = std::vector<at::cuda::CUDAEvent>(static_cast<std::size_t>(depth_));
  }

  int lookahead() const override { return copy_stream_ ? depth_ - 1 : 0; }

  void set_destination(const at::Tensor& images, const at::Tensor& labels) override {
    if (copy_stream_) return;  // the ring keeps the overlap; the graph copies from it on the device
    images_ = {images};
    labels_ = {labels};
    writes_destination_ = true;
  }
  bool writes_destination() const override { return writes_destination_; }

  void submit(const host_batch& batch, batch_loader& loader) override {
    allocate_once(batch);
    const std::size_t slot = static_cast<std::size_t>(submitted_++ % depth_);
    const std::size_t host_slot = static_cast<std::size_t>(batch.slot);
    if (host_fences_.size() <= host_slot) host_fences_.resize(static_cast<std::size_t>(loader.slots()));
    auto copy = [&] {
      rows(images_[slot], batch.count).copy_(rows(batch.images, batch.count), non_blocking_);
      rows(labels_[slot], batch.count).copy_(rows(batch.labels, batch.count), non_blocking_);
    };
    if (copy_stream_) {
      c10::cuda::CUDAStreamGuard guard(*copy_stream_);
      copy();
      ready_[slot].record(*copy_stream_);
      host_fences_[host_slot].record(*copy_stream_);
    } else {
      copy();
      if (non_blocking_) host_fences_[host_slot].record(c10::cuda::getCurrentCUDAStream(device_.index()));
    }
    copy_fence fence;
    if (non_blocking_) {
      // The worker waits for this copy before it overwrites the pinned buffer.
      at::cuda::CUDAEvent* ev = &host_fences_[host_slot];
      fence = [ev] { ev->synchronize(); };
    }
    // Read index and count first: once released, a worker may refill the slot at once.
    pending_.push_back({slot, batch.index, batch.count});
    loader.release(batch, std::move(fence));
  }

  device_batch take() override {
    const pending p = pending_.front();
    pending_.pop_front();
    taken_ = p.slot;
    if (copy_stream_) ready_[p.slot].block(c10::cuda::getCurrentCUDAStream(device_.index()));
    return {rows(images_[p.slot], p.count), rows(labels_[p.slot], p.count), p.index, p.count};
  }

  void step_done() override {
    if (!copy_stream_) return;
    // The next copy the runner submits reuses this buffer (round robin, lookahead = depth - 1), so
    // the copy stream waits for this step here, before that copy's timing event is recorded.
    free_[taken_].record(c10::cuda::getCurrentCUDAStream(device_.index()));
    free_[taken_].block(*copy_stream_);
  }

  std::string describe() const override {
    std::string mode = copy_stream_ ? "copy stream, ring of " + std::to_string(depth_) + " device buffers"
                                    : (non_blocking_ ? "non_blocking copy on the compute stream"
                                                     : "blocking copy on the compute stream");
    mode += pinned_ ? ", from pinned memory" : ", from pageable memory";
    if (writes_destination_) mode += ", straight into the CUDA graph's static inputs";
    return mode;
  }

  std::optional<c10::cuda::CUDAStream> stream() const override { return copy_stream_; }

 private:
  struct pending {
    std::size_t slot;
    std::int64_t index, count;
  };

  // The ring's buffers come from the compute stream's pool, whose blocks the caching allocator
  // hands back as soon as that stream's work is queued (safe for that stream only): a block freed
  // there may still be read by a queued kernel (the weights' NHWC copies, say). So before its
  // first write, the copy stream waits once for what the compute stream has queued.
  void allocate_once(const host_batch& batch) {
    if (!images_.empty()) return;
    for (int i = 0; i < depth_; ++i) {
      images_.push_back(at::empty_like(batch.images, at::TensorOptions().device(device_), at::MemoryFormat::Preserve));
      labels_.push_back(at::empty_like(batch.labels, at::TensorOptions().device(device_)));
    }
    if (!copy_stream_) return;
    at::cuda::CUDAEvent allocated;
    allocated.record(c10::cuda::getCurrentCUDAStream(device_.index()));
    allocated.block(*copy_stream_);
  }

  c10::Device device_;
  bool pinned_, non_blocking_;
  bool writes_destination_ = false;
  int depth_ = 1;
  std::optional<c10::cuda::CUDAStream> copy_stream_;
  std::vector<at::Tensor> images_, labels_;
  std::vector<at::cuda::CUDAEvent> ready_, free_, host_fences_;
  std::deque<pending> pending_;
  std::size_t taken_ = 0;
  std::int64_t submitted_ = 0;
};

}  // namespace

std::unique_ptr<transfer_stage> make_cuda_transfer(c10::Device device, const transfer_config& cfg, bool pinned) {
  return std::make_unique<cuda_transfer>(device, cfg, pinned);
}

}  // namespace trainbench
