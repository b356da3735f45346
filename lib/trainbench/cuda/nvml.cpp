#include "trainbench/cuda/nvml.hpp"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

namespace trainbench {

namespace {
template <class F>
F symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}
}  // namespace

nvml_library::nvml_library() {
  handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle_) return;
  init_ = symbol<int (*)()>(handle_, "nvmlInit_v2");
  shutdown_ = symbol<int (*)()>(handle_, "nvmlShutdown");
  by_bus_ = symbol<int (*)(const char*, nvml_device*)>(handle_, "nvmlDeviceGetHandleByPciBusId_v2");
  driver_ = symbol<int (*)(char*, unsigned)>(handle_, "nvmlSystemGetDriverVersion");
  utilization = symbol<int (*)(nvml_device, nvml_utilization*)>(handle_, "nvmlDeviceGetUtilizationRates");
  clock_info = symbol<int (*)(nvml_device, unsigned, unsigned*)>(handle_, "nvmlDeviceGetClockInfo");
  power_usage = symbol<int (*)(nvml_device, unsigned*)>(handle_, "nvmlDeviceGetPowerUsage");
  clock_reasons = symbol<int (*)(nvml_device, unsigned long long*)>(handle_, "nvmlDeviceGetCurrentClocksEventReasons");
  if (!clock_reasons)
    clock_reasons =
        symbol<int (*)(nvml_device, unsigned long long*)>(handle_, "nvmlDeviceGetCurrentClocksThrottleReasons");
  ok_ = init_ && shutdown_ && by_bus_ && utilization && init_() == 0;
}

nvml_library::~nvml_library() {
  if (ok_) shutdown_();
  if (handle_) dlclose(handle_);
}

bool nvml_library::open(int cuda_index, nvml_device& out) const {
  if (!ok_) return false;
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_index) != cudaSuccess) return false;
  return by_bus_(bus, &out) == 0;
}

std::string nvml_library::driver_version() const {
  char text[96] = {};
  if (!ok_ || !driver_ || driver_(text, sizeof text) != 0) return "";
  return text;
}

}  // namespace trainbench
