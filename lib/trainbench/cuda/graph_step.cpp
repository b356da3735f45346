// The whole training step (forward, loss, backward, unscale, SGD, scale update) captured once
// into a CUDA graph and replayed per batch: the C++ stand-in for torch.compile.
#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/autograd.h>

#include <optional>

#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/amp.hpp"
#include "trainbench/stages/grad_scaler.hpp"
#include "trainbench/stages/optimizer.hpp"

namespace trainbench {
namespace {

// keep_graph: capture_end() only closes the capture and instantiation is a separate call, so an
// instantiation failure (out of memory near the edge, as the batch-size search provokes) cannot
// throw out of capture_end() after the graph has taken ownership of its pool. capture_ended()
// tells whether it has: from then on the graph's reset() releases the pool, and nobody else may.
class step_graph final : public at::cuda::CUDAGraph {
 public:
  step_graph() : at::cuda::CUDAGraph(/*keep_graph=*/true) {}
  bool capture_ended() const { return capture_ended_; }
};

// Ends an open capture if an exception unwinds through it, so the stream is usable again. When
// that capture_end() fails too (cudaStreamEndCapture rejects an invalidated capture, e.g. one
// that tried to sync), CUDAGraph throws before it tells the allocators the capture is over, and
// its reset() releases the private pool only after a successful capture. Left so, the caching
// allocator believes a capture is still underway: every later emptyCache() fails an internal
// assertion (the batch-size search empties the cache after each try) and an allocation that
// misses never frees cached blocks. So the guard ends the pool's use itself, but releases the
// pool only while the graph has not reached capture_ended_: a second release would take the
// pool's use count below zero, and reset() asserts on that in the graph's noexcept destructor.
class capture_guard {
 public:
  capture_guard(step_graph& g, c10::DeviceIndex device, c10::MempoolId_t pool)
      : graph_(g), device_(device), pool_(pool) {}
  ~capture_guard() {
    if (done_) return;
    if (!graph_.capture_ended()) ignore_errors([&] { graph_.capture_end(); });
    if (graph_.capture_ended()) return;  // the graph's reset() releases its pool, once
    // Each may already have happened (or never begun) depending on where the capture failed.
    auto* host = at::getHostAllocator(at::kCUDA);
    ignore_errors([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(device_, pool_); });
    ignore_errors([&] { host->end_allocate_to_pool(pool_); });
    ignore_errors([&] { c10::cuda::CUDACachingAllocator::releasePool(device_, pool_); });
    ignore_errors([&] { host->release_pool(pool_); });
  }
  capture_guard(const capture_guard&) = delete;
  capture_guard& operator=(const capture_guard&) = delete;
  void done() { done_ = true; }

 private:
  template <class F>
  static void ignore_errors(F&& f) {
    try {
      f();
    } catch (...) {
    }
  }
  step_graph& graph_;
  c10::DeviceIndex device_;
  c10::MempoolId_t pool_;
  bool done_ = false;
};

// Copies of tensors a step changes in place, written back by restore().
class state_snapshot {
 public:
  explicit state_snapshot(std::vector<at::Tensor> live) : live_(std::move(live)) {
    at::NoGradGuard no_grad;
    for (const auto& t : live_) saved_.push_back(t.detach().clone());
  }
  void restore() const {
    at::NoGradGuard no_grad;
    for (std::size_t i = 0; i < live_.size(); ++i) live_[i].detach().copy_(saved_[i]);
  }

 private:
  std::vector<at::Tensor> live_, saved_;
};

class graph_step final : public train_step {
 public:
  graph_step(resnet model, const step_options& o, const std::vector<std::int64_t>& shape, bool channels_last)
      : model_(std::move(model)),
        options_(o),
        optimizer_(make_step_optimizer(model_->parameters(), o.optimizer, o.fused_sgd)) {
    auto f = at::TensorOptions().device(o.device);
    static_images_ = at::zeros(shape, f.dtype(o.input_dtype));
    if (channels_last) static_images_ = static_images_.contiguous(at::MemoryFormat::ChannelsLast);
    static_labels_ = at::zeros({shape[0]}, f.dtype(at::kLong));
    if (o.scaler) scaler_.emplace(o.device);
  }

  void forward(const device_batch& batch) override {
    // Copy into the static inputs unless the transfer stage already wrote there.
    if (batch.images.data_ptr() != static_images_.data_ptr()) {
      static_images_.copy_(batch.images, true);
      static_labels_.copy_(batch.labels, true);
    }
    if (!graph_) capture();
    graph_->replay();
  }
  void prepare() override {
    if (!graph_) capture();
  }
  void backward() override {}
  void optimizer_step() override {}
  bool fused() const override { return true; }
  at::Tensor last_loss() const override { return static_loss_; }
  const grad_scaler* scaler() const override { return scaler_ ? &*scaler_ : nullptr; }
  const resnet& model() const override { return model_; }
  std::string describe() const override {
    return "CUDA graph of forward + loss + backward + " + optimizer_->describe() +
           std::string(scaler_ ? " + loss scaling" : "") + " (captured before the first batch, after " +
           std::to_string(graph_warmup_steps) + " eager warm-up steps on a side stream whose updates are undone)";
  }
  std::pair<at::Tensor, at::Tensor> static_inputs() const override { return {static_images_, static_labels_}; }

 private:
  at::Tensor body() {
    at::Tensor loss;
    {
      autocast_scope amp(c10::kCUDA, amp_dtype(options_.amp), options_.amp != amp_mode::off);
      loss = at::cross_entropy_loss(model_->forward(static_images_), static_labels_);
    }
    if (scaler_) scaler_->see(loss, static_images_);
    (scaler_ ? scaler_->scale(loss) : loss).backward();
    if (scaler_) {
      optimizer_->step_scaled(*scaler_);
      scaler_->update();
    } else {
      optimizer_->step();
    }
    return loss.detach();
  }

  // Everything a step changes in place: parameters, batch-norm statistics, momentum, scaler.
  std::vector<at::Tensor> step_state() const {
    std::vector<at::Tensor> state = model_->parameters();
    for (const auto& b : model_->buffers()) state.push_back(b);
    for (const auto& b : optimizer_->state()) state.push_back(b);
    if (scaler_)
      for (const auto& t : scaler_->state()) state.push_back(t);
    return state;
  }

  void capture() {
    // Every stream, sync and allocator call below is on the run's device, whichever is current.
    c10::cuda::CUDAGuard device_guard(options_.device);
    const auto index = options_.device.index();
    auto current = c10::cuda::getCurrentCUDAStream(index);
    auto side = c10::cuda::getStreamFromPool(false, index);
    {
      // The warm-up steps train on whatever the static inputs hold (zeros before the first batch):
      // undo them, so the graph trains exactly as the eager step would on the same batches.
      const state_snapshot saved(step_state());
      at::cuda::CUDAEvent before, after;
      before.record(current);
      before.block(side);
      {
        // Lazy work must happen before capture: cuDNN autotuning, cuBLAS handles and workspaces,
        // allocator blocks for this stream.
        c10::cuda::CUDAStreamGuard guard(side);
        for (int i = 0; i < graph_warmup_steps; ++i) {
          optimizer_->zero_grad();
          body();
        }
        optimizer_->zero_grad();  // grads are allocated from the graph's pool during capture
      }
      after.record(side);
      after.block(current);
      saved.restore();
    }
    c10::cuda::device_synchronize();
    // As torch.cuda.graph does before capture_begin: hand the warm-up's cached blocks back to the
    // driver. The allocator never frees cached blocks during a capture, so without this the
    // graph's private pool would need a second copy of the activations and gradients.
    c10::cuda::CUDACachingAllocator::emptyCache();
    const autocast_cache_off no_cache;  // restored on unwind too
    auto graph = std::make_unique<step_graph>();
    {
      c10::cuda::CUDAStreamGuard guard(side);
      const c10::MempoolId_t pool = at::cuda::graph_pool_handle();
      capture_guard open(*graph, c10::cuda::current_device(), pool);
      // Thread-local mode: a loader thread pinning memory must not invalidate the capture.
      graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      static_loss_ = body();
      graph->capture_end();
      open.done();
    }
    // After the guard: if this throws, the graph owns its pool and its destructor releases it.
    graph->instantiate();
    graph_ = std::move(graph);  // only a complete capture: after a failed one, the next batch captures again
  }

  resnet model_;
  step_options options_;
  std::unique_ptr<step_optimizer> optimizer_;
  std::optional<grad_scaler> scaler_;
  at::Tensor static_images_, static_labels_, static_loss_;
  std::unique_ptr<step_graph> graph_;
};

}  // namespace

std::unique_ptr<train_step> make_graph_step(resnet model, const step_options& options,
                                            const std::vector<std::int64_t>& input_shape, bool channels_last) {
  return std::make_unique<graph_step>(std::move(model), options, input_shape, channels_last);
}

}  // namespace trainbench
