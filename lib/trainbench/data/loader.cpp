#include "trainbench/data/loader.hpp"

#include <ATen/Context.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "trainbench/config/bounds.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

batch_loader::batch_loader(std::shared_ptr<const dataset> data, loader_options options)
    : data_(std::move(data)),
      options_(std::move(options)),
      files_(data_->files()),
      counters_(std::max(1, options_.workers)) {
  sinks_.push_back(&counters_);
  if (options_.trace) sinks_.push_back(options_.trace);
  if (files_) {
    TB_ASSERT(!options_.raw_uint8, "image folders vary in size; they cannot ship raw source images");
  } else {
    TB_ASSERT(!options_.encoded, "only image folders ship encoded files");
  }
  if (files_) {
    folder_options& f = options_.folder;
    f.image_size = options_.image_size;
    f.channels_last = options_.channels_last;
    f.mean = options_.mean;
    f.std = options_.std;
    f.seed = options_.seed;
    bad_ = std::make_unique<bad_files>(files_->size());
    if (options_.encoded && f.decode_off_engines) refused_ = std::make_unique<engine_refusals>(files_->size());
  } else {
    transform_ =
        std::make_unique<image_transform>(data_->height(), data_->width(), data_->channels(), options_.image_size,
                                          options_.mean, options_.std, options_.channels_last);
  }
  const std::int64_t n = data_->size();
  shard_size_ = n / options_.world;
  const std::int64_t b = options_.batch_size;
  batches_per_epoch_ = options_.drop_last ? shard_size_ / b : (shard_size_ + b - 1) / b;
  if (batches_per_epoch_ < 1) {
    throw input_error(data_->describe() + " has " + std::to_string(shard_size_) +
                      " samples per rank, fewer than one batch of " + std::to_string(b) + " with drop_last");
  }
  pinned_ = options_.pin_memory;
  const int count = ring_slots(options_);
  auto opts = at::TensorOptions().pinned_memory(pinned_);
  slots_.resize(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    auto& s = slots_[static_cast<std::size_t>(i)];
    if (options_.encoded) {
      s.batch.encoded = &s.files;
    } else if (options_.raw_uint8) {
      s.batch.images = at::empty({b, data_->height(), data_->width(), data_->channels()}, opts.dtype(at::kByte));
    } else {
      const auto format = options_.channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
      s.batch.images = at::empty({b, 3, options_.image_size, options_.image_size}, opts.dtype(at::kFloat), format);
    }
    // With nvJPEG the labels still cross on the copy stream: pinned, so that copy never blocks the
    // host (the file bytes are pinned only with data.pin_memory, in the file ring).
    const bool pin_labels = pinned_ || (options_.encoded && at::hasCUDA());
    s.batch.labels = at::empty({b}, opts.dtype(at::kLong).pinned_memory(pin_labels));
    s.batch.slot = i;
    s.next_index = i;
  }
  if (options_.encoded && options_.file_ring_bytes > 0) {
    ring_memory_ = at::empty({static_cast<std::int64_t>(options_.file_ring_bytes)}, opts.dtype(at::kByte));
    ring_ = std::make_unique<byte_ring>(ring_memory_.data_ptr<std::uint8_t>(), options_.file_ring_bytes);
  }
  if (options_.workers == 0) main_state_ = make_state(0);
  for (int w = 0; w < options_.workers; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
}

int batch_loader::ring_slots(const loader_options& o) {
  return static_cast<int>(loader_slot_count(o.workers, o.prefetch_factor));
}

std::size_t batch_loader::file_ring_size(const loader_options& o) {
  // A file as sent (ImageNet's average is about 110 KB), or a worker's pixels of a crop's region,
  // packed RGB (for ImageNet's average 500 x 375 image, half its area about 280 KB at full
  // resolution; less where a large crop lets the worker decode at a DCT scale), in the share
  // data.device_decode_share leaves to the workers.
  const double file = 160 << 10, pixels = 384 << 10;
  const double share = o.folder.decode_off_engines ? std::clamp(o.folder.device_share, 0.0, 1.0) : 1.0;
  const auto per_file = static_cast<std::size_t>(share * file + (1 - share) * pixels);
  const std::size_t most = std::size_t{1} << 30;
  return std::min(most, static_cast<std::size_t>(ring_slots(o)) * static_cast<std::size_t>(o.batch_size) * per_file);
}

batch_loader::~batch_loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  if (ring_) ring_->close();  // a worker may wait in it for room or its turn
  changed_.notify_all();
  for (auto& t : threads_) t.join();
  // A fence may refer to a copy still in flight; wait before the buffers go away.
  for (auto& s : slots_)
    if (s.fence) s.fence();
}

std::shared_ptr<const std::vector<std::int64_t>> batch_loader::epoch_order(std::int64_t epoch) const {
  std::lock_guard<std::mutex> lock(order_mutex_);
  auto it = orders_.find(epoch);
  if (it != orders_.end()) return it->second;
  std::vector<std::int64_t> all(static_cast<std::size_t>(data_->size()));
  std::iota(all.begin(), all.end(), 0);
  if (options_.shuffle) {
    std::mt19937_64 rng(options_.seed * 1000003ULL + static_cast<std::uint64_t>(epoch));
    std::shuffle(all.begin(), all.end(), rng);
  }
  // DistributedSampler semantics: rank r takes positions r, r + world, ...; equal shard sizes.
  auto order = std::make_shared<std::vector<std::int64_t>>();
  order->reserve(static_cast<std::size_t>(shard_size_));
  for (std::int64_t i = options_.rank; i < shard_size_ * options_.world; i += options_.world)
    order->push_back(all[static_cast<std::size_t>(i)]);
  orders_[epoch] = order;
  while (orders_.size() > 4) orders_.erase(orders_.begin());
  return order;
}

batch_loader::batch_span batch_loader::span_of(std::int64_t index) const {
  const std::int64_t epoch = index / batches_per_epoch_, j = index % batches_per_epoch_;
  batch_span out;
  out.order = epoch_order(epoch);
  out.first = j * options_.batch_size;
  out.count = std::min<std::int64_t>(options_.batch_size, shard_size_ - out.first);
  return out;
}

std::vector<std::int64_t> batch_loader::batch_indices(std::int64_t index) const {
  const batch_span b = span_of(index);
  return {b.order->begin() + b.first, b.order->begin() + b.first + b.count};
}

batch_loader::worker_state batch_loader::make_state(int id) {
  worker_state w;
  w.id = id;
  if (files_) w.reader = std::make_unique<folder_reader>(*files_, options_.folder, *bad_, refused_.get());
  return w;
}

bool batch_loader::decode_on_workers(std::int64_t index) {
  if (!refused_) return false;
  TB_ASSERT(index >= 0 && index < files_->size(), "decode_on_workers: no such file");
  refused_->add(index);
  return true;
}

std::vector<skipped_file> batch_loader::skipped_files() const {
  return bad_ ? bad_->files() : std::vector<skipped_file>{};
}

std::int64_t batch_loader::replaced_samples() const { return bad_ ? bad_->replacements() : 0; }

void batch_loader::fill(slot& s, std::int64_t index, worker_state& w, std::int64_t wait_begin) {
  if (s.fence) {
    if (options_.trace && wait_begin < 0) wait_begin = steady_now_ns();
    s.fence();
    s.fence = nullptr;
  }
  const std::int64_t begin = steady_now_ns();
  if (options_.trace && wait_begin >= 0) options_.trace->slot_wait(w.id, index, s.batch.slot, wait_begin, begin);
  // Read this batch's positions of the epoch order in place (no per-batch allocation).
  const batch_span span = span_of(index);
  fill_samples(s, span, index, w);
  // Every batch takes its turn in the file ring, in index order, so a batch never waits for room
  // held by a later one. No room yet: the ring waits for the device to finish the oldest reads.
  if (ring_) {
    s.block = ring_->acquire(index, s.files.bytes.size());
    if (s.block) {
      std::memcpy(s.block.data, s.files.bytes.data(), s.files.bytes.size());
      s.files.ring = s.block.data;
    }
  }
  s.batch.index = index;
  s.batch.count = span.count;
  counters_.count_images(w.id, span.count);
  const std::int64_t end = steady_now_ns();
  for (load_sink* sink : sinks_) sink->batch_filled(w.id, index, s.batch.slot, begin, end);
}

void batch_loader::fill_samples(slot& s, const batch_span& span, std::int64_t index, worker_state& w) {
  const std::int64_t count = span.count;
  const std::int64_t* indices = span.order->data() + span.first;
  auto* labels = s.batch.labels.data_ptr<std::int64_t>();
  if (files_ && options_.encoded) {
    const std::int64_t epoch = index / batches_per_epoch_;
    phase_marker marks(sinks_, w.id, index);
    s.files.clear();
    const double share = options_.folder.device_share;
    for (std::int64_t i = 0; i < count; ++i)
      labels[i] = w.reader->read_encoded(indices[i], epoch, s.files, marks, offered_to_device(i, share));
  } else if (files_) {
    float* out = s.batch.images.data_ptr<float>();
    const std::int64_t floats = 3LL * options_.image_size * options_.image_size;
    const std::int64_t epoch = index / batches_per_epoch_;
    phase_marker marks(sinks_, w.id, index);
    for (std::int64_t i = 0; i < count; ++i) labels[i] = w.reader->read(indices[i], epoch, out + i * floats, marks);
  } else if (options_.raw_uint8) {
    auto* out = s.batch.images.data_ptr<std::uint8_t>();
    const std::size_t bytes = static_cast<std::size_t>(data_->height()) * data_->width() * data_->channels();
    for (std::int64_t i = 0; i < count; ++i) {
      const sample_view v = data_->sample(indices[i]);
      std::memcpy(out + static_cast<std::size_t>(i) * bytes, v.pixels, bytes);
      labels[i] = v.label;
    }
  } else {
    float* out = s.batch.images.data_ptr<float>();
    const std::int64_t floats = transform_->output_floats();
    for (std::int64_t i = 0; i < count; ++i) {
      const sample_view v = data_->sample(indices[i]);
      transform_->apply(v.pixels, out + i * floats, w.scratch);
      labels[i] = v.label;
    }
  }
}

// The first worker's error is the one the training thread rethrows; every worker stops.
void batch_loader::fail(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = std::move(error);
  stopping_ = true;
  if (ring_) ring_->close();
  changed_.notify_all();
}

void batch_loader::worker_loop(int worker) {
  worker_state state;
  try {
    state = make_state(worker);
  } catch (...) {
    fail(std::current_exception());
    return;
  }
  const int k = slots();
  for (std::int64_t index = worker;; index += options_.workers) {
    slot& s = slots_[static_cast<std::size_t>(index % k)];
    const std::int64_t wait_begin = options_.trace ? steady_now_ns() : -1;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || (s.state == slot_state::free && s.next_index == index); });
      if (stopping_) return;
      s.state = slot_state::filling;
    }
    try {
      fill(s, index, state, wait_begin);
    } catch (...) {
      fail(std::current_exception());
      return;
    }
    int ready = 0;
    std::int64_t at = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      s.state = slot_state::ready;
      ready = ++ready_;
      if (options_.trace) at = steady_now_ns();  // under the lock: the counter's changes stay in time order
    }
    changed_.notify_all();
    if (options_.trace) options_.trace->batch_ready(worker, index, ready, at);
  }
}

const host_batch& batch_loader::next() {
  const std::int64_t index = consumed_++;
  slot& s = slots_[static_cast<std::size_t>(index % slots())];
  if (options_.workers == 0) {
    TB_ASSERT(s.state == slot_state::free && s.next_index == index, "ring slot still held by the consumer");
    fill(s, index, main_state_, -1);
    s.state = slot_state::ready;
    return s.batch;
  }
  int ready = 0;
  std::int64_t at = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return error_ || (s.state == slot_state::ready && s.batch.index == index); });
    if (error_) std::rethrow_exception(error_);
    ready = --ready_;
    if (options_.trace) at = steady_now_ns();
  }
  if (options_.trace) options_.trace->batch_taken(index, ready, at);
  return s.batch;
}

void batch_loader::release(const host_batch& batch, copy_fence fence) {
  slot& s = slots_[static_cast<std::size_t>(batch.slot)];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TB_ASSERT(s.state == slot_state::ready && s.batch.index == batch.index, "release of a batch not handed out");
    if (s.block) ring_->release(s.block, fence);  // the ring takes it back only when it needs the room
    s.block = {};
    s.fence = std::move(fence);
    s.next_index = batch.index + slots();
    s.state = slot_state::free;
  }
  changed_.notify_all();
}

}  // namespace trainbench
