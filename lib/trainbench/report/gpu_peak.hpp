#pragma once
// Vendor peak compute of the GPUs whose figures we know, to put a run's model FLOP/s against
// (no torch here).
#include <optional>
#include <string>

namespace trainbench {

struct gpu_peak {
  std::string gpu;     // the table's name for the part, e.g. "H100 SXM"
  double flops_per_s;  // dense fp16/bf16 tensor-core peak (no structured sparsity)
  std::string source;  // where the figure comes from
};

// The peak of the GPU a device name (as CUDA or NVML report it, e.g. "NVIDIA H100 80GB HBM3")
// denotes; nullopt for parts not in the table.
std::optional<gpu_peak> dense_tensor_peak(const std::string& device_name);

}  // namespace trainbench
