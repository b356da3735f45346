#include "trainbench/data/byte_ring.hpp"

#include <algorithm>

namespace trainbench {

byte_ring::byte_ring(std::uint8_t* memory, std::size_t capacity) : memory_(memory), capacity_(capacity) {}

// Blocks lie in allocation order around the ring, from the oldest (front) to the newest (back);
// a new one goes right after the newest, or at the start when the end has no room, never over
// the oldest.
std::size_t byte_ring::fit(std::size_t size) {
  if (count_ == 0) return size <= capacity_ ? 0 : capacity_;
  const std::size_t tail = front().offset;
  const std::size_t head = back().offset + back().size;
  if (back().offset >= front().offset) {  // not wrapped: room after head and before tail
    if (capacity_ - head >= size) return head;
    if (tail >= size) return 0;
    return capacity_;
  }
  return tail - head >= size ? head : capacity_;  // wrapped: room between head and tail
}

void byte_ring::push_back(entry e) {
  if (count_ == blocks_.size()) {
    std::vector<entry> larger(std::max<std::size_t>(8, 2 * count_));
    for (std::size_t k = 0; k < count_; ++k) larger[k] = std::move(nth(k));
    blocks_ = std::move(larger);
    head_ = 0;
  }
  blocks_[(head_ + count_) % blocks_.size()] = std::move(e);
  ++count_;
}

void byte_ring::pop_front() {
  front() = entry{};  // drops the fence it may still hold
  head_ = (head_ + 1) % blocks_.size();
  --count_;
}

void byte_ring::drop_reclaimed() {
  while (count_ > 0 && front().st == state::free) {
    held_ -= front().size;
    pop_front();
  }
}

byte_ring::block byte_ring::acquire(std::int64_t ticket, std::size_t size) {
  size = std::max<std::size_t>(size, 1);
  std::unique_lock<std::mutex> lock(mutex_);
  ++waiting_;
  changed_.wait(lock, [&] { return closed_ || next_ticket_ == ticket; });
  --waiting_;
  if (closed_) return {};
  if (size > capacity_) {  // never fits: pass the turn on
    ++next_ticket_;
    lock.unlock();
    changed_.notify_all();
    return {};
  }
  while (!closed_) {
    drop_reclaimed();
    const std::size_t at = fit(size);
    if (at != capacity_) {
      push_back({at, size, state::live, {}});
      held_ += size;
      peak_ = std::max(peak_, held_);
      ++next_ticket_;
      lock.unlock();
      changed_.notify_all();
      return {memory_ + at, at, size, ticket};
    }
    // No room, so the ring is not empty. Only the producer whose turn it is pops blocks, so the
    // front stays put while its fence runs unlocked.
    entry& oldest = front();
    if (oldest.st == state::released) {
      oldest.st = state::reclaiming;
      const fence done = std::move(oldest.done);
      lock.unlock();
      done();
      lock.lock();
      front().st = state::free;
      ++fences_run_;
      continue;
    }
    ++waiting_;  // the consumer still reads the oldest block: wait for its release
    changed_.wait(lock);
    --waiting_;
  }
  return {};
}

void byte_ring::release(const block& b, fence done) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entry* it = nullptr;
    for (std::size_t k = 0; k < count_ && !it; ++k)
      if (nth(k).offset == b.offset && nth(k).st == state::live) it = &nth(k);
    if (!it) return;  // closed and dropped, or released twice: nothing held
    if (done) {
      it->st = state::released;
      it->done = std::move(done);
    } else {
      it->st = state::free;
    }
  }
  changed_.notify_all();
}

void byte_ring::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

std::size_t byte_ring::held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_;
}

std::size_t byte_ring::peak_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

std::int64_t byte_ring::fences_run() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fences_run_;
}

int byte_ring::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_;
}

}  // namespace trainbench
