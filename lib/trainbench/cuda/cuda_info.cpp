#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <cstdio>

#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/nvml.hpp"

namespace trainbench {

bool cuda_code_compiled() { return true; }

void make_device_current(c10::Device device) { c10::cuda::set_device(device.index()); }

std::string cuda_device_name(c10::Device device) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  return prop ? prop->name : "unknown CUDA device";
}

cuda_device_facts cuda_device_info(c10::Device device) {
  cuda_device_facts f;
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  if (!prop) return f;
  f.name = prop->name;
  f.memory_bytes = static_cast<std::int64_t>(prop->totalGlobalMem);
  // The form nvidia-smi prints: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  const auto* b = reinterpret_cast<const unsigned char*>(prop->uuid.bytes);
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  f.uuid = uuid;
  f.driver = nvml_library().driver_version();
  return f;
}

namespace {
std::string dotted(int v, int major_div, int minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div);
}
}  // namespace

cuda_versions cuda_library_versions() {
  cuda_versions v;
  int runtime = 0, driver = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess && runtime > 0) v.runtime = dotted(runtime, 1000, 10);
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) v.driver = dotted(driver, 1000, 10);
  const long cudnn = at::detail::getCUDAHooks().versionCuDNN();
  if (cudnn > 0)
    v.cudnn =
        std::to_string(cudnn / 10000) + "." + std::to_string((cudnn % 10000) / 100) + "." + std::to_string(cudnn % 100);
  return v;
}

}  // namespace trainbench
