// results.kernel_families on CUDA: PyTorch's profiler (Kineto over CUPTI) records every kernel
// of a profiled window that runs after the measured ones, CUDA activity only (no host events,
// no shapes, no stacks). Reading the records needs the device idle, so stop() synchronises:
// never inside a measured window.
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/profiler/orchestration/observer.h>

#include <exception>
#include <stdexcept>

#include "trainbench/measure/kernel_families.hpp"

namespace trainbench {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

const std::string source = "PyTorch profiler (Kineto, CUPTI kernel records)";

// Kineto names its copy and memset records "Memcpy ..." and "Memset ...".
bool kernel_by_name(const std::string& name) { return name.rfind("Memcpy", 0) != 0 && name.rfind("Memset", 0) != 0; }

class kineto_recorder final : public kernel_recorder {
 public:
  explicit kineto_recorder(int device) : device_(static_cast<c10::DeviceIndex>(device)) {}
  // disableProfiler on a thread whose profiler is not running (one that failed to start) reads a
  // null state in torch 2.11 instead of throwing: ask first.
  ~kineto_recorder() override {
    if (!on_ || !torch::profiler::impl::profilerEnabled()) return;
    try {
      prof::disableProfiler();
    } catch (...) {
    }
  }

  void start() override {
    const ProfilerConfig config(ProfilerState::KINETO);
    const std::set<ActivityType> activities{ActivityType::CUDA};
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
    on_ = true;
  }

  kernel_family_result stop(int batches) override {
    {
      c10::cuda::CUDAGuard guard(device_);
      c10::cuda::device_synchronize();  // every kernel of the window has finished (and been recorded)
    }
    on_ = false;
    if (!torch::profiler::impl::profilerEnabled())
      throw std::runtime_error("the profiler was no longer running at the end of the profiled window");
    const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
    if (!result) return sum_kernel_families({}, batches, source);
    // Kernels of this device only: no memcpy, memset or annotation records, told apart by Kineto's
    // activity type; by name where no record carries the kernel type (a build that does not pass
    // it on). CUPTI 13.0 can hand Kineto records stamped before the trace began
    // (pytorch/pytorch#192021, fixed in CUDA 13.1): their durations mean nothing, and an unsigned
    // end - start may wrap. Those are left out and counted.
    const auto kernel = static_cast<std::uint8_t>(libkineto::ActivityType::CONCURRENT_KERNEL);
    bool typed = false;
    for (const auto& e : result->events()) typed = typed || e.activityType() == kernel;
    std::vector<kernel_record> records;
    std::int64_t dropped = 0;
    for (const auto& e : result->events()) {
      if (e.deviceType() != c10::DeviceType::CUDA || e.deviceIndex() != device_) continue;
      if (typed ? e.activityType() != kernel : !kernel_by_name(e.name())) continue;
      if (e.startNs() < result->trace_start_ns() || e.endNs() <= e.startNs()) {
        ++dropped;
        continue;
      }
      records.push_back({e.name(), static_cast<double>(e.endNs() - e.startNs()) * 1e-9});
    }
    return sum_kernel_families(records, batches, typed ? source : source + ", kernels told apart by name", dropped);
  }

 private:
  c10::DeviceIndex device_;
  bool on_ = false;
};

}  // namespace

std::unique_ptr<kernel_recorder> make_kineto_recorder(int device) { return std::make_unique<kineto_recorder>(device); }

}  // namespace trainbench
