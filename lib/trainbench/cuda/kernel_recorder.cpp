// results.kernel_families on CUDA: PyTorch's profiler (Kineto over CUPTI) records every kernel
// of a profiled window that runs after the measured ones, CUDA activity only (no host events,
// no shapes, no stacks). Reading the records needs the device idle, so stop() synchronises:
// never inside a measured window.
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <exception>

#include "trainbench/measure/kernel_families.hpp"

namespace trainbench {
namespace {

namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

class kineto_recorder final : public kernel_recorder {
 public:
  explicit kineto_recorder(int device) : device_(static_cast<c10::DeviceIndex>(device)) {}
  ~kineto_recorder() override {
    if (!on_) return;
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
    const std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
    std::vector<kernel_record> records;
    if (result)
      for (const auto& e : result->events())
        if (e.deviceType() == c10::DeviceType::CUDA && e.durationNs() > 0)
          records.push_back({e.name(), static_cast<double>(e.durationNs()) * 1e-9});
    return sum_kernel_families(records, batches, "PyTorch profiler (Kineto, CUPTI kernel records)");
  }

 private:
  c10::DeviceIndex device_;
  bool on_ = false;
};

}  // namespace

std::unique_ptr<kernel_recorder> make_kineto_recorder(int device) { return std::make_unique<kineto_recorder>(device); }

}  // namespace trainbench
