#pragma once
// The loader: N worker threads assemble whole batches straight into a fixed ring of reusable
// (optionally pinned) buffers and hand them over in order. No allocation per batch.
#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "trainbench/data/dataset.hpp"
#include "trainbench/data/transform.hpp"

namespace trainbench {

struct loader_options {
  int batch_size = 32;
  int workers = 0;
  int prefetch_factor = 2;
  bool pin_memory = false;  // only honoured when the caller says pinning is possible
  bool shuffle = true;
  bool drop_last = true;
  bool channels_last = false;
  bool raw_uint8 = false;  // ship source pixels; resize/normalise happen on the device
  int image_size = 224;
  std::vector<double> mean{0.5, 0.5, 0.5}, std{0.5, 0.5, 0.5};
  std::uint64_t seed = 0;
  int rank = 0, world = 1;  // each rank reads a disjoint shard of every epoch
};

struct host_batch {
  at::Tensor images;        // float [B,3,S,S] (channels_last memory if asked) or uint8 [B,H,W,C] when raw
  at::Tensor labels;        // int64 [B]
  std::int64_t index = -1;  // position in the stream of batches
  std::int64_t count = 0;   // samples (the last batch of an epoch may be short without drop_last)
  int slot = -1;
};

// Called by a worker before it overwrites a slot: blocks until the copy that read it finished.
using copy_fence = std::function<void()>;

class batch_loader {
 public:
  batch_loader(std::shared_ptr<const dataset> data, loader_options options);
  ~batch_loader();
  batch_loader(const batch_loader&) = delete;
  batch_loader& operator=(const batch_loader&) = delete;

  // The next batch in order; stays valid until release(). Rethrows a worker's error.
  const host_batch& next();
  void release(const host_batch& batch, copy_fence fence = {});

  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  std::int64_t samples_per_epoch() const { return shard_size_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  int workers() const { return options_.workers; }
  bool pinned() const { return pinned_; }
  // Indices of the samples in batch `index` (for tests and checksums).
  std::vector<std::int64_t> batch_indices(std::int64_t index) const;

 private:
  enum class slot_state { free, filling, ready };
  struct slot {
    host_batch batch;
    slot_state state = slot_state::free;
    std::int64_t next_index = 0;  // the batch this slot may take next
    copy_fence fence;
  };

  struct batch_span {
    std::shared_ptr<const std::vector<std::int64_t>> order;  // the epoch's sample order
    std::int64_t first = 0, count = 0;                       // this batch's positions in it
  };
  batch_span span_of(std::int64_t index) const;
  void worker_loop(int worker);
  void fill(slot& s, std::int64_t index, std::vector<float>& scratch);
  std::shared_ptr<const std::vector<std::int64_t>> epoch_order(std::int64_t epoch) const;

  std::shared_ptr<const dataset> data_;
  loader_options options_;
  image_transform transform_;
  std::int64_t shard_size_ = 0, batches_per_epoch_ = 0;
  bool pinned_ = false;
  std::vector<slot> slots_;
  std::int64_t consumed_ = 0;
  std::vector<float> main_scratch_;

  mutable std::mutex order_mutex_;
  mutable std::map<std::int64_t, std::shared_ptr<const std::vector<std::int64_t>>> orders_;

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace trainbench
