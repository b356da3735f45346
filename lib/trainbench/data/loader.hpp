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

#include "trainbench/data/byte_ring.hpp"
#include "trainbench/data/dataset.hpp"
#include "trainbench/data/folder_reader.hpp"
#include "trainbench/data/load_timing.hpp"
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
  bool encoded = false;    // image folders, data.decode: device: ship the files, undecoded
  // Encoded batches: the bytes of the ring the workers copy each batch's files into (pinned when
  // pin_memory is honoured, so the device reads them asynchronously); 0: no ring, the files stay
  // in each slot's own pageable buffer. A batch larger than the ring stays there too.
  std::size_t file_ring_bytes = 0;
  int image_size = 224;
  std::vector<double> mean{0.5, 0.5, 0.5}, std{0.5, 0.5, 0.5};
  std::uint64_t seed = 0;
  int rank = 0, world = 1;  // each rank reads a disjoint shard of every epoch
  // Image folders: the transform, bad-file policy and size limit (the rest is taken from above).
  folder_options folder;
  load_sink* trace = nullptr;  // optional: also receives every fill, phase, slot wait and ring change
};

struct host_batch {
  at::Tensor images;  // float [B,3,S,S] (channels_last memory if asked) or uint8 [B,H,W,C] when raw
  at::Tensor labels;  // int64 [B]
  const encoded_batch* encoded = nullptr;  // data.decode: device: the files and their crops (images undefined)
  std::int64_t index = -1;                 // position in the stream of batches
  std::int64_t count = 0;                  // samples (the last batch of an epoch may be short without drop_last)
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

  // The ring's size for these options: prefetch_factor batches per worker, at least two.
  static int ring_slots(const loader_options& options);
  // The file ring's size for these options: 160 KiB a file for every slot's batch (ImageNet's
  // JPEGs average 110 KB), 384 KiB for the workers' pixels of the share data.device_decode_share
  // leaves them, at most 1 GiB.
  static std::size_t file_ring_size(const loader_options& options);
  std::size_t file_ring_capacity() const { return ring_ ? ring_->capacity() : 0; }
  bool file_ring_pinned() const { return ring_ && pinned_; }
  std::int64_t batches_per_epoch() const { return batches_per_epoch_; }
  std::int64_t samples_per_epoch() const { return shard_size_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  int workers() const { return options_.workers; }
  bool pinned() const { return pinned_; }
  bool encoded() const { return options_.encoded; }
  const file_list* files() const { return files_; }  // image folders; null otherwise
  // Indices of the samples in batch `index` (for tests and checksums).
  std::vector<std::int64_t> batch_indices(std::int64_t index) const;
  // What the workers have spent so far (read it before and after a window).
  load_totals load_counts() const { return counters_.totals(); }
  // Image folders with data.on_bad_file: skip.
  std::vector<skipped_file> skipped_files() const;
  std::int64_t replaced_samples() const;
  // Encoded image folders with decode_off_engines: the device found its JPEG engines refuse file
  // `index` although its markers allowed it; the workers decode it from its next read on. False
  // where the workers decode nothing for the device (the device keeps such files).
  bool decode_on_workers(std::int64_t index);
  std::int64_t files_moved_to_workers() const { return refused_ ? refused_->count() : 0; }

 private:
  enum class slot_state { free, filling, ready };
  struct slot {
    host_batch batch;
    slot_state state = slot_state::free;
    std::int64_t next_index = 0;  // the batch this slot may take next
    copy_fence fence;
    encoded_batch files;     // data.decode: device
    byte_ring::block block;  // where files.bytes were copied for the consumer (file_ring_bytes)
  };

  struct batch_span {
    std::shared_ptr<const std::vector<std::int64_t>> order;  // the epoch's sample order
    std::int64_t first = 0, count = 0;                       // this batch's positions in it
  };
  // What one filling thread keeps between batches.
  struct worker_state {
    int id = 0;
    std::vector<float> scratch;
    std::unique_ptr<folder_reader> reader;  // image folders only
  };
  batch_span span_of(std::int64_t index) const;
  void worker_loop(int worker);
  void fail(std::exception_ptr error);
  worker_state make_state(int id);
  // wait_begin: when the filling thread started waiting for this slot (-1: not traced).
  void fill(slot& s, std::int64_t index, worker_state& w, std::int64_t wait_begin);
  void fill_samples(slot& s, const batch_span& span, std::int64_t index, worker_state& w);
  std::shared_ptr<const std::vector<std::int64_t>> epoch_order(std::int64_t epoch) const;

  std::shared_ptr<const dataset> data_;
  loader_options options_;
  std::unique_ptr<image_transform> transform_;  // fixed-size sources
  const file_list* files_ = nullptr;            // image folders
  std::unique_ptr<bad_files> bad_;
  std::unique_ptr<engine_refusals> refused_;  // encoded image folders with decode_off_engines
  load_counters counters_;
  std::vector<load_sink*> sinks_;
  std::int64_t shard_size_ = 0, batches_per_epoch_ = 0;
  bool pinned_ = false;
  std::vector<slot> slots_;
  at::Tensor ring_memory_;           // before ring_: it outlives the ring
  std::unique_ptr<byte_ring> ring_;  // encoded batches with file_ring_bytes
  std::int64_t consumed_ = 0;
  int ready_ = 0;  // filled and not yet taken (guarded by mutex_; counted for a trace)
  worker_state main_state_;

  mutable std::mutex order_mutex_;
  mutable std::map<std::int64_t, std::shared_ptr<const std::vector<std::int64_t>>> orders_;

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
};

}  // namespace trainbench
