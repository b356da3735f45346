#include "trainbench/measure/batch_search.hpp"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <mutex>
#include <string>

#include "trainbench/util/error.hpp"

namespace trainbench {
namespace {

constexpr std::int64_t first_try = 8, limit = 1 << 16;

// The default generators of the CPU and of every CUDA device, put back on destruction.
class generator_states {
 public:
  generator_states() {
    generators_.push_back(at::globalContext().defaultGenerator(c10::kCPU));
    for (std::size_t i = 0; i < at::getNumGPUs(); ++i)
      generators_.push_back(
          at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))));
    for (auto& g : generators_) {
      std::lock_guard<std::mutex> lock(g.mutex());
      states_.push_back(g.get_state());
    }
  }
  ~generator_states() {
    for (std::size_t i = 0; i < generators_.size(); ++i) {
      std::lock_guard<std::mutex> lock(generators_[i].mutex());
      generators_[i].set_state(states_[i]);
    }
  }
  generator_states(const generator_states&) = delete;
  generator_states& operator=(const generator_states&) = delete;

 private:
  std::vector<at::Generator> generators_;
  std::vector<at::Tensor> states_;
};

}  // namespace

std::int64_t search_largest_batch(const batch_fits& fits, std::vector<std::pair<std::int64_t, bool>>& trials) {
  const generator_states keep;
  auto attempt = [&](std::int64_t b) {
    const bool ok = fits(b);
    trials.push_back({b, ok});
    return ok;
  };
  std::int64_t good = 0, bad = 0;
  for (std::int64_t b = first_try; b <= limit; b *= 2) {
    if (!attempt(b)) {
      bad = b;
      break;
    }
    good = b;
  }
  if (good == 0)
    throw run_error("out_of_memory",
                    "train.batch_size: auto: not even a batch of " + std::to_string(first_try) + " fits on the device");
  if (bad == 0) return good;                                   // everything up to the limit fits
  while (bad - good > std::max<std::int64_t>(1, good / 64)) {  // within ~1.5%: each try is a real step
    const std::int64_t mid = good + (bad - good) / 2;
    (attempt(mid) ? good : bad) = mid;
  }
  return good;
}

}  // namespace trainbench
