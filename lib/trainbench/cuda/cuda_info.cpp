#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>

#include "trainbench/cuda/cuda_stages.hpp"

namespace trainbench {

bool cuda_code_compiled() { return true; }

std::string cuda_device_name(c10::Device device) {
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  return prop ? prop->name : "unknown CUDA device";
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
