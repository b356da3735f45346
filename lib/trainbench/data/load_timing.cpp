#include "trainbench/data/load_timing.hpp"

#include <chrono>

#include "trainbench/util/error.hpp"

namespace trainbench {

const char* load_phase_name(load_phase p) {
  switch (p) {
    case load_phase::read:
      return "read";
    case load_phase::decode:
      return "decode";
    case load_phase::resize:
      return "crop_resize";
  }
  return "?";
}

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

load_totals load_totals::operator-(const load_totals& earlier) const {
  load_totals d;
  d.batches = batches - earlier.batches;
  d.images = images - earlier.images;
  d.fill_s = fill_s - earlier.fill_s;
  for (int i = 0; i < load_phase_count; ++i) d.phase_s[i] = phase_s[i] - earlier.phase_s[i];
  return d;
}

load_counters::load_counters(int workers) : slots_(new slot[static_cast<std::size_t>(workers)]), count_(workers) {
  TB_ASSERT(workers >= 1, "at least one filling thread");
}

namespace {
// Single writer per slot: a relaxed load and store, no read-modify-write on the hot path.
void add(std::atomic<std::int64_t>& a, std::int64_t v) {
  a.store(a.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}
}  // namespace

void load_counters::batch_filled(int worker, std::int64_t, int, std::int64_t begin_ns, std::int64_t end_ns) {
  slot& s = slots_[static_cast<std::size_t>(worker)];
  add(s.batches, 1);
  add(s.fill_ns, end_ns - begin_ns);
}

void load_counters::phase(int worker, std::int64_t, load_phase p, std::int64_t begin_ns, std::int64_t end_ns) {
  add(slots_[static_cast<std::size_t>(worker)].phase_ns[static_cast<int>(p)], end_ns - begin_ns);
}

void load_counters::count_images(int worker, std::int64_t images) {
  add(slots_[static_cast<std::size_t>(worker)].images, images);
}

load_totals load_counters::totals() const {
  load_totals t;
  for (int w = 0; w < count_; ++w) {
    const slot& s = slots_[static_cast<std::size_t>(w)];
    t.batches += s.batches.load(std::memory_order_relaxed);
    t.images += s.images.load(std::memory_order_relaxed);
    t.fill_s += 1e-9 * static_cast<double>(s.fill_ns.load(std::memory_order_relaxed));
    for (int i = 0; i < load_phase_count; ++i)
      t.phase_s[i] += 1e-9 * static_cast<double>(s.phase_ns[i].load(std::memory_order_relaxed));
  }
  return t;
}

void phase_marker::begin(load_phase p) {
  const std::int64_t now = steady_now_ns();
  if (running_)
    for (load_sink* s : sinks_) s->phase(worker_, batch_, phase_, since_, now);
  running_ = true;
  phase_ = p;
  since_ = now;
}

void phase_marker::end() {
  if (!running_) return;
  const std::int64_t now = steady_now_ns();
  for (load_sink* s : sinks_) s->phase(worker_, batch_, phase_, since_, now);
  running_ = false;
}

}  // namespace trainbench
