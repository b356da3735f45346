#include "trainbench/measure/kernel_families.hpp"

#include <algorithm>
#include <cctype>
#include <initializer_list>

namespace trainbench {

const char* kernel_family_name(kernel_family f) {
  switch (f) {
    case kernel_family::convolution:
      return "convolution";
    case kernel_family::norm_activation:
      return "norm_activation";
    case kernel_family::optimizer:
      return "optimizer";
    case kernel_family::other:
      return "other";
  }
  return "other";
}

namespace {

bool has_any(const std::string& lower, std::initializer_list<const char*> markers) {
  for (const char* m : markers)
    if (lower.find(m) != std::string::npos) return true;
  return false;
}

}  // namespace

// In this order, the first family with a marker in the name wins:
// - optimizer: ATen's multi-tensor kernels (foreach and fused SGD, the loss scaler's
//   unscale-and-check) and the scale update;
// - normalisation and activation: ATen's and cuDNN's batch norm (forward, backward, statistics),
//   ReLU (clamp_min forward, threshold backward) and the residual add (ATen's add functor);
//   cuDNN's batch-norm kernels say "bn_", before "cudnn" would call them convolutions;
// - convolution: cuDNN's and CUTLASS's convolution kernels (forward, data and weight gradients,
//   implicit GEMM, Winograd) and cuDNN's layout conversions around them;
// - other: everything else (pooling, the linear layer's GEMM, the loss, casts, copies).
kernel_family classify_kernel(const std::string& name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (has_any(n, {"multi_tensor_apply", "fused_sgd", "foreach", "amp_update_scale", "non_finite_check"}))
    return kernel_family::optimizer;
  if (has_any(n, {"batch_norm", "batchnorm", "bn_fw", "bn_bw", "bn_", "welford", "relu", "clamp", "threshold",
                  "functor_add", "add_kernel"}))
    return kernel_family::norm_activation;
  if (has_any(n, {"conv2d", "convolution", "convolve", "conv_", "_conv", "implicit_gemm", "implicitgemm", "fprop",
                  "dgrad", "wgrad", "winograd", "nchwtonhwc", "nhwctonchw", "cudnn"}))
    return kernel_family::convolution;
  return kernel_family::other;
}

bool host_device_copy(const std::string& name) {
  return name.rfind("Memcpy HtoD", 0) == 0 || name.rfind("Memcpy DtoH", 0) == 0;
}

kernel_family_result sum_kernel_families(const std::vector<kernel_record>& records, int batches,
                                         const std::string& source) {
  kernel_family_result out;
  out.source = source;
  out.batches = batches;
  for (int f = 0; f < kernel_family_count; ++f) out.seconds[kernel_family_name(static_cast<kernel_family>(f))] = 0;
  for (const auto& r : records) {
    if (host_device_copy(r.name)) continue;
    out.seconds[kernel_family_name(classify_kernel(r.name))] += r.seconds;
    ++out.kernels;
  }
  out.measured = out.kernels > 0;
  if (!out.measured) out.reason = "the profiler recorded no kernels in the profiled window";
  return out;
}

}  // namespace trainbench
