#pragma once
// A bounded ring of host memory for the compressed bytes of batches (data.decode: device with
// data.pin_memory: the memory is pinned, so the device reads it by DMA, asynchronously). The
// loader's workers fill it, one block per batch, in batch order; the consumer releases a block
// once the reads of it are enqueued, with a fence that blocks until they have run. Memory is
// taken back lazily: only when a batch does not fit does the producer whose turn it is run the
// oldest released block's fence (backpressure: the loader waits for the device, never grows).
// No torch and no CUDA here: the owner provides the memory and the fences.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

namespace trainbench {

class byte_ring {
 public:
  using fence = std::function<void()>;  // blocks until the device has read the block; may be empty

  struct block {
    std::uint8_t* data = nullptr;
    std::size_t offset = 0, size = 0;
    std::int64_t ticket = -1;
    explicit operator bool() const { return data != nullptr; }
  };

  // `memory` holds `capacity` bytes and outlives the ring.
  byte_ring(std::uint8_t* memory, std::size_t capacity);
  byte_ring(const byte_ring&) = delete;
  byte_ring& operator=(const byte_ring&) = delete;

  // Waits for `ticket`'s turn (tickets are 0, 1, 2, ..., each taken once: the batch indices), then
  // for `size` contiguous bytes, running released blocks' fences oldest first as needed. Returns
  // an empty block, passing the turn on, when `size` exceeds the capacity (the caller keeps that
  // batch in pageable memory) or once the ring is closed.
  block acquire(std::int64_t ticket, std::size_t size);
  // The reads of `b` are enqueued; `done` blocks until they have run. Each block once.
  void release(const block& b, fence done);
  // Wakes every waiter; acquire returns empty blocks from now on. Released blocks' fences are not
  // run: the owner waits for the device before the memory goes.
  void close();

  std::size_t capacity() const { return capacity_; }
  std::size_t held() const;        // bytes of blocks not yet taken back
  std::size_t peak_held() const;   // the most held at once
  std::int64_t fences_run() const; // released blocks taken back by running their fence
  int waiting() const;             // threads blocked in acquire now (for tests)

 private:
  enum class state { live, released, reclaiming, free };
  struct entry {
    std::size_t offset = 0, size = 0;
    state st = state::live;
    fence done;
  };
  // The blocks in allocation order, the oldest first: a queue kept in a vector used round, which
  // grows only when more blocks are held at once than ever before, so that a steady loop does
  // not allocate (a deque allocates and frees a node every few batches). Lock held for all.
  entry& front() { return blocks_[head_]; }
  entry& back() { return nth(count_ - 1); }
  entry& nth(std::size_t k) { return blocks_[(head_ + k) % blocks_.size()]; }
  void push_back(entry e);
  void pop_front();
  // Where `size` bytes fit after the newest block, or capacity_ when they do not (lock held).
  std::size_t fit(std::size_t size);
  void drop_reclaimed();  // pops taken-back blocks off the front (lock held)

  std::uint8_t* memory_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<entry> blocks_;  // count_ of them from head_, round
  std::size_t head_ = 0, count_ = 0;
  std::int64_t next_ticket_ = 0;
  std::size_t held_ = 0, peak_ = 0;
  std::int64_t fences_run_ = 0;
  int waiting_ = 0;
  bool closed_ = false;
};

}  // namespace trainbench
