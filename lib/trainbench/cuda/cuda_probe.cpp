// Peak device memory from the caching allocator, and NVML telemetry sampled on a side thread.
// NVML is loaded with dlopen: no NVML on the machine simply leaves the fields null.
#include <c10/cuda/CUDACachingAllocator.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/nvml.hpp"

namespace trainbench {
namespace {

class cuda_probe final : public device_probe {
 public:
  explicit cuda_probe(c10::Device device) : device_(device) {}
  ~cuda_probe() override { stop_sampling(); }

  void reset_peaks() override { c10::cuda::CUDACachingAllocator::resetPeakStats(device_.index()); }

  void start_sampling() override {
    nvml_device dev = nullptr;
    if (!nvml_.open(device_.index(), dev)) return;
    running_ = true;
    sampler_ = std::thread([this, dev] {
      // Every 100 ms (NVML itself averages utilisation over 1/6 s to 1 s); stop wakes it at once.
      std::unique_lock<std::mutex> lock(wake_mutex_);
      do {
        lock.unlock();
        sample(dev);
        lock.lock();
      } while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return !running_; }));
    });
  }

  void stop_sampling() override {
    {
      std::lock_guard<std::mutex> lock(wake_mutex_);
      running_ = false;
    }
    wake_.notify_all();
    if (sampler_.joinable()) sampler_.join();
  }

  void fill(memory_result& memory, telemetry_result& telemetry) const override {
    device_probe::fill(memory, telemetry);
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_.index());
    memory.device_peak_allocated_bytes = stats.allocated_bytes[0].peak;  // [0]: aggregate pool
    memory.device_peak_reserved_bytes = stats.reserved_bytes[0].peak;
    std::lock_guard<std::mutex> lock(mutex_);
    if (n_ == 0) return;
    telemetry.source = "nvml";
    telemetry.samples = n_;
    telemetry.gpu_util_pct_mean = gpu_ / n_;
    telemetry.mem_util_pct_mean = mem_ / n_;
    if (clock_n_) telemetry.sm_clock_mhz_mean = clock_sum_ / clock_n_;
    if (power_n_) telemetry.power_w_mean = power_sum_ / power_n_;
    telemetry.throttle_reasons_seen = reasons_seen_;
  }

  void keep_samples(std::size_t capacity) override {
    std::lock_guard<std::mutex> lock(mutex_);
    kept_.reserve(capacity);
    keep_ = capacity;
  }

  std::size_t take_samples(std::vector<telemetry_sample>& out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    out.insert(out.end(), kept_.begin(), kept_.end());
    kept_.clear();  // keeps the capacity
    const std::size_t dropped = dropped_;
    dropped_ = 0;
    return dropped;
  }

 private:
  void sample(nvml_device dev) {
    // Stamped before the queries (each can take milliseconds); NVML's utilisation is itself an
    // average over its last sampling period, so the counter track trails the work it shows.
    const std::int64_t at =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    nvml_utilization u{};
    if (nvml_.utilization(dev, &u) != 0) return;
    unsigned clock = 0, milliwatts = 0;
    unsigned long long reasons = 0;
    const bool has_clock = nvml_.clock_info && nvml_.clock_info(dev, nvml_clock_sm, &clock) == 0;
    const bool has_power = nvml_.power_usage && nvml_.power_usage(dev, &milliwatts) == 0;
    const bool has_reasons = nvml_.clock_reasons && nvml_.clock_reasons(dev, &reasons) == 0;
    std::lock_guard<std::mutex> lock(mutex_);
    if (keep_ && kept_.size() < keep_) {
      kept_.push_back({at, static_cast<double>(u.gpu), has_clock ? static_cast<double>(clock) : -1.0,
                       has_power ? milliwatts / 1000.0 : -1.0});
    } else if (keep_) {
      ++dropped_;
    }
    ++n_;
    gpu_ += u.gpu;
    mem_ += u.memory;
    if (has_clock) clock_sum_ += clock, ++clock_n_;
    if (has_power) power_sum_ += milliwatts / 1000.0, ++power_n_;
    if (has_reasons) reasons_seen_ |= reasons;
  }

  c10::Device device_;
  nvml_library nvml_;
  bool running_ = false;  // guarded by wake_mutex_
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::thread sampler_;
  mutable std::mutex mutex_;
  std::size_t n_ = 0, clock_n_ = 0, power_n_ = 0;
  double gpu_ = 0, mem_ = 0, clock_sum_ = 0, power_sum_ = 0;
  std::uint64_t reasons_seen_ = 0;
  std::size_t keep_ = 0, dropped_ = 0;  // keep_samples (a trace's counter tracks); guarded by mutex_
  std::vector<telemetry_sample> kept_;
};

}  // namespace

std::unique_ptr<device_probe> make_cuda_probe(c10::Device device) { return std::make_unique<cuda_probe>(device); }

}  // namespace trainbench
