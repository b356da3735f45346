// Peak device memory from the caching allocator, and NVML telemetry sampled on a side thread.
// NVML is loaded with dlopen: no NVML on the machine simply leaves the fields null.
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "trainbench/cuda/cuda_stages.hpp"

namespace trainbench {
namespace {

// The few NVML declarations we need (nvml.h is not part of the toolkit everywhere).
using nvml_device = void*;
struct nvml_utilization {
  unsigned gpu, memory;
};
constexpr unsigned nvml_clock_sm = 1;

class nvml_library {
 public:
  nvml_library() {
    handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle_) return;
    init_ = reinterpret_cast<int (*)()>(dlsym(handle_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<int (*)()>(dlsym(handle_, "nvmlShutdown"));
    by_bus_ = reinterpret_cast<int (*)(const char*, nvml_device*)>(dlsym(handle_, "nvmlDeviceGetHandleByPciBusId_v2"));
    util_ = reinterpret_cast<int (*)(nvml_device, nvml_utilization*)>(dlsym(handle_, "nvmlDeviceGetUtilizationRates"));
    clock_ = reinterpret_cast<int (*)(nvml_device, unsigned, unsigned*)>(dlsym(handle_, "nvmlDeviceGetClockInfo"));
    power_ = reinterpret_cast<int (*)(nvml_device, unsigned*)>(dlsym(handle_, "nvmlDeviceGetPowerUsage"));
    throttle_ = reinterpret_cast<int (*)(nvml_device, unsigned long long*)>(
        dlsym(handle_, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (!throttle_)
      throttle_ = reinterpret_cast<int (*)(nvml_device, unsigned long long*)>(
          dlsym(handle_, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    ok_ = init_ && shutdown_ && by_bus_ && util_ && init_() == 0;
  }
  ~nvml_library() {
    if (ok_) shutdown_();
    if (handle_) dlclose(handle_);
  }
  // NVML numbers devices in PCI order and ignores CUDA_VISIBLE_DEVICES: map by bus id.
  bool open(int cuda_index, nvml_device& out) const {
    if (!ok_) return false;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_index) != cudaSuccess) return false;
    return by_bus_(bus, &out) == 0;
  }
  void* handle_ = nullptr;
  bool ok_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_)(const char*, nvml_device*) = nullptr;
  int (*util_)(nvml_device, nvml_utilization*) = nullptr;
  int (*clock_)(nvml_device, unsigned, unsigned*) = nullptr;
  int (*power_)(nvml_device, unsigned*) = nullptr;
  int (*throttle_)(nvml_device, unsigned long long*) = nullptr;
};

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
      while (running_) {
        sample(dev);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // NVML averages over >= 1/6 s anyway
      }
    });
  }

  void stop_sampling() override {
    running_ = false;
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
    if (clock_n_) telemetry.sm_clock_mhz_mean = clock_ / clock_n_;
    if (power_n_) telemetry.power_w_mean = power_ / power_n_;
    telemetry.throttle_reasons_seen = throttle_;
  }

 private:
  void sample(nvml_device dev) {
    nvml_utilization u{};
    if (nvml_.util_(dev, &u) != 0) return;
    unsigned clock = 0, milliwatts = 0;
    unsigned long long reasons = 0;
    const bool has_clock = nvml_.clock_ && nvml_.clock_(dev, nvml_clock_sm, &clock) == 0;
    const bool has_power = nvml_.power_ && nvml_.power_(dev, &milliwatts) == 0;
    const bool has_reasons = nvml_.throttle_ && nvml_.throttle_(dev, &reasons) == 0;
    std::lock_guard<std::mutex> lock(mutex_);
    ++n_;
    gpu_ += u.gpu;
    mem_ += u.memory;
    if (has_clock) clock_ += clock, ++clock_n_;
    if (has_power) power_ += milliwatts / 1000.0, ++power_n_;
    if (has_reasons) throttle_ |= reasons;
  }

  c10::Device device_;
  nvml_library nvml_;
  std::atomic<bool> running_{false};
  std::thread sampler_;
  mutable std::mutex mutex_;
  std::size_t n_ = 0, clock_n_ = 0, power_n_ = 0;
  double gpu_ = 0, mem_ = 0, clock_ = 0, power_ = 0;
  std::uint64_t throttle_ = 0;
};

}  // namespace

std::unique_ptr<device_probe> make_cuda_probe(c10::Device device) { return std::make_unique<cuda_probe>(device); }

}  // namespace trainbench
