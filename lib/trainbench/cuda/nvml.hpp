#pragma once
// NVML, loaded with dlopen: nvml.h is not part of every toolkit and the library comes with the
// driver. No NVML on the machine is not an error: ok() is false and callers report nulls.
#include <string>

namespace trainbench {

using nvml_device = void*;
struct nvml_utilization {
  unsigned gpu, memory;
};
constexpr unsigned nvml_clock_sm = 1;

class nvml_library {
 public:
  nvml_library();
  ~nvml_library();
  nvml_library(const nvml_library&) = delete;
  nvml_library& operator=(const nvml_library&) = delete;

  bool ok() const { return ok_; }
  // NVML numbers devices in PCI order and ignores CUDA_VISIBLE_DEVICES: map by bus id.
  bool open(int cuda_index, nvml_device& out) const;
  std::string driver_version() const;  // "" when unknown

  int (*utilization)(nvml_device, nvml_utilization*) = nullptr;
  int (*clock_info)(nvml_device, unsigned, unsigned*) = nullptr;
  int (*power_usage)(nvml_device, unsigned*) = nullptr;
  int (*clock_reasons)(nvml_device, unsigned long long*) = nullptr;

 private:
  void* handle_ = nullptr;
  bool ok_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_)(const char*, nvml_device*) = nullptr;
  int (*driver_)(char*, unsigned) = nullptr;
};

}  // namespace trainbench
