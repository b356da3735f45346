// Store calls with a bound: c10d's own calls wait on a dead link for as long as the kernel keeps
// the connection (see c10d_state.hpp).
#include <c10/util/Exception.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "trainbench/distributed/c10d_state.hpp"

namespace trainbench {

std::string store_error_text(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

bool call_within(std::function<void()> op, std::chrono::milliseconds limit) {
  struct shared {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
    std::function<void()> op;
  };
  auto s = std::make_shared<shared>();
  s->op = std::move(op);
  std::thread([s] {
    std::exception_ptr error;
    try {
      s->op();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(s->mutex);
    s->error = error;
    s->done = true;
    s->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(s->mutex);
  if (!s->done_cv.wait_for(lock, limit, [&] { return s->done; })) return false;
  if (s->error) std::rethrow_exception(s->error);
  return true;
}

key_wait wait_for_keys(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<std::string>& keys,
                       std::chrono::steady_clock::time_point deadline, std::chrono::milliseconds call_limit,
                       const std::function<void()>& between) {
  // Asked often at first (a peer a moment behind), then every 100 ms.
  std::chrono::milliseconds pause{2};
  for (;;) {
    auto ready = std::make_shared<bool>(false);
    if (!call_within([store, keys, ready] { *ready = store->check(keys); }, call_limit)) return key_wait::unreachable;
    if (*ready) return key_wait::ready;
    if (between) between();
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return key_wait::timed_out;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace trainbench
