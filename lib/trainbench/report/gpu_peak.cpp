#include "trainbench/report/gpu_peak.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace trainbench {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

bool ends_with(const std::string& name, const std::string& tail) {
  return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
}

// Whole words only: "nvidia l4" is an L4, "nvidia l40s" is not.
bool has_word(const std::string& name, const std::string& word) {
  for (std::size_t at = name.find(word); at != std::string::npos; at = name.find(word, at + 1)) {
    const bool start = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    const std::size_t end = at + word.size();
    if (start && (end == name.size() || !std::isalnum(static_cast<unsigned char>(name[end])))) return true;
  }
  return false;
}

constexpr double tflops = 1e12;

}  // namespace

std::optional<gpu_peak> dense_tensor_peak(const std::string& device_name) {
  const std::string n = lower(device_name);
  // NVIDIA's datasheets quote fp16/bf16 tensor peaks "with sparsity"; the dense figure, which is
  // what a ResNet's convolutions can use, is half of that (the datasheets' footnote).
  if (has(n, "h200")) {
    if (has(n, "nvl")) return gpu_peak{"H200 NVL", 835.5 * tflops, "NVIDIA H200 datasheet: 1,671 TFLOPS with sparsity"};
    return gpu_peak{"H200 SXM", 989.4 * tflops, "NVIDIA H200 datasheet: 1,979 TFLOPS with sparsity; 989.4 dense"};
  }
  if (has(n, "h100")) {
    if (has(n, "pcie"))
      return gpu_peak{"H100 PCIe", 756 * tflops,
                      "NVIDIA H100 datasheet: 1,513 TFLOPS with sparsity; 756 dense (H100 whitepaper)"};
    if (has(n, "nvl")) return gpu_peak{"H100 NVL", 835.5 * tflops, "NVIDIA H100 datasheet: 1,671 TFLOPS with sparsity"};
    return gpu_peak{"H100 SXM", 989.4 * tflops,
                    "NVIDIA H100 datasheet: 1,979 TFLOPS with sparsity; 989.4 dense (H100 whitepaper)"};
  }
  if (has(n, "a100"))
    return gpu_peak{"A100", 312 * tflops, "NVIDIA A100 datasheet: 312 TFLOPS dense (624 with sparsity)"};
  if (has_word(n, "l4")) return gpu_peak{"L4", 121 * tflops, "NVIDIA L4 datasheet: 242 TFLOPS with sparsity"};
  // GeForce parts run fp16/bf16 with fp32 accumulation (what autocast's matmuls and convolutions
  // use) at half their fp16-accumulate rate.
  if (ends_with(n, "rtx 4090"))
    return gpu_peak{"RTX 4090", 165.2 * tflops,
                    "NVIDIA Ada Lovelace architecture whitepaper: 165.2 TFLOPS fp16/bf16 tensor with fp32 accumulate, "
                    "dense"};
  // The part NVIDIA's ResNet-50 numbers for configs/resnet50 were also published on (fp16 only).
  if (has(n, "v100")) {
    if (has(n, "v100s")) return gpu_peak{"V100S PCIe", 130 * tflops, "NVIDIA V100 datasheet: 130 TFLOPS tensor"};
    if (has(n, "pcie")) return gpu_peak{"V100 PCIe", 112 * tflops, "NVIDIA V100 datasheet: 112 TFLOPS tensor"};
    return gpu_peak{"V100 SXM2", 125 * tflops, "NVIDIA V100 datasheet: 125 TFLOPS tensor"};
  }
  return std::nullopt;
}

}  // namespace trainbench
