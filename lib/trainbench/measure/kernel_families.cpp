#include "trainbench/measure/kernel_families.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <initializer_list>
#include <unordered_map>

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

// The name without its parameter list: CUPTI demangles a kernel's parameter types too, and a type
// there says nothing of what the kernel does (the fused crop takes a `fused_crop_normalizer`,
// which "_norm" would file with batch norm). The list is the parentheses that close the name;
// parentheses inside template arguments (a lambda's enclosing function) are balanced and stay.
std::string without_parameters(const std::string& name) {
  if (name.empty() || name.back() != ')') return name;
  int depth = 0;
  for (std::size_t i = name.size(); i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0) return name.substr(0, i);
  }
  return name;
}

}  // namespace

// In this order, the first family with a marker in the name wins:
// - optimizer: ATen's multi-tensor kernels (foreach and fused SGD, the loss scaler's
//   unscale-and-check) and the scale update;
// - normalisation and activation: ATen's and cuDNN's batch norm (forward, backward, statistics),
//   ReLU (clamp_min forward, threshold backward) and the residual add (ATen's add functor);
//   cuDNN's batch-norm kernels say "bn_" or "norm" (its graph engines' names are not documented:
//   the report's top names per family show where they went), before "cudnn" would call them
//   convolutions;
// - convolution: cuDNN's and CUTLASS's convolution kernels (forward, data and weight gradients,
//   implicit GEMM, Winograd) and cuDNN's layout conversions around them;
// - other: everything else (pooling, the linear layer's GEMM, the loss, casts, copies, the
//   loader's device work: the fused crop, nvJPEG, the device resize).
// Only the name before its parameter list is read (without_parameters).
kernel_family classify_kernel(const std::string& name) {
  std::string n = without_parameters(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (has_any(n, {"multi_tensor_apply", "fused_sgd", "fusedsgd", "foreach", "amp_update_scale", "non_finite_check"}))
    return kernel_family::optimizer;
  if (has_any(n, {"batch_norm", "batchnorm", "bn_fw", "bn_bw", "bn_", "norm_", "_norm", "bnorm", "welford", "relu",
                  "clamp", "threshold", "functor_add", "add_kernel"}))
    return kernel_family::norm_activation;
  if (has_any(n, {"conv2d", "convolution", "convolve", "conv_", "_conv", "implicit_gemm", "implicitgemm", "fprop",
                  "dgrad", "wgrad", "winograd", "nchwtonhwc", "nhwctonchw", "cudnn"}))
    return kernel_family::convolution;
  return kernel_family::other;
}

bool host_device_copy(const std::string& name) {
  return name.rfind("Memcpy HtoD", 0) == 0 || name.rfind("Memcpy DtoH", 0) == 0;
}

namespace {

// Longest first; a name's ties broken by the name, so the order is the same run after run.
void rank(std::vector<kernel_top>& tops) {
  std::sort(tops.begin(), tops.end(), [](const kernel_top& a, const kernel_top& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.name < b.name;
  });
  if (tops.size() > kernel_tops) tops.resize(kernel_tops);
}

}  // namespace

void merge_kernel_tops(std::vector<kernel_top>& into, const std::vector<kernel_top>& more) {
  for (const kernel_top& m : more) {
    auto same = std::find_if(into.begin(), into.end(), [&](const kernel_top& t) { return t.name == m.name; });
    if (same == into.end()) {
      into.push_back(m);
      continue;
    }
    same->seconds += m.seconds;
    same->kernels += m.kernels;
  }
  rank(into);
}

std::vector<std::string> describe_kernel_families(const kernel_family_result& k) {
  if (!k.measured || k.batches <= 0) return {};
  double total = 0;
  for (const auto& [family, s] : k.seconds) total += s;
  if (total <= 0) return {};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f ms of kernels per batch:", 1000.0 * total / k.batches);
  std::string shares = buf;
  std::string largest;
  double largest_s = -1;
  for (int f = 0; f < kernel_family_count; ++f) {
    const std::string family = kernel_family_name(static_cast<kernel_family>(f));
    const auto it = k.seconds.find(family);
    const double s = it == k.seconds.end() ? 0 : it->second;
    std::snprintf(buf, sizeof buf, " %s %.1f%%%s", family.c_str(), 100.0 * s / total, f + 1 < kernel_family_count ? "," : "");
    shares += buf;
    if (s > largest_s) {
      largest = family;
      largest_s = s;
    }
  }
  std::vector<std::string> out{shares};
  const auto tops = k.top.find(largest);
  if (tops != k.top.end() && !tops->second.empty()) {
    const kernel_top& t = tops->second.front();
    std::snprintf(buf, sizeof buf, " (%.3f ms per batch, %s)", 1000.0 * t.seconds / k.batches, largest.c_str());
    out.push_back("longest: " + t.name.substr(0, 80) + buf);
  }
  if (k.dropped > 0) out.push_back(std::to_string(k.dropped) + " records with timestamps outside the trace left out");
  return out;
}

kernel_family_result sum_kernel_families(const std::vector<kernel_record>& records, int batches,
                                         const std::string& source, std::int64_t dropped) {
  kernel_family_result out;
  out.source = source;
  out.batches = batches;
  out.dropped = dropped;
  std::unordered_map<std::string, kernel_top> by_name[kernel_family_count];
  for (const auto& r : records) {
    if (host_device_copy(r.name)) continue;
    const kernel_family f = classify_kernel(r.name);
    out.seconds[kernel_family_name(f)] += r.seconds;
    ++out.kernels;
    const std::string name = r.name.substr(0, kernel_top_name_chars);
    kernel_top& t = by_name[static_cast<int>(f)][name];
    t.name = name;
    t.seconds += r.seconds;
    ++t.kernels;
  }
  for (int f = 0; f < kernel_family_count; ++f) {
    const std::string family = kernel_family_name(static_cast<kernel_family>(f));
    out.seconds[family] += 0;  // every family is in the report, 0 where none ran
    std::vector<kernel_top>& tops = out.top[family];
    for (auto& [name, t] : by_name[f]) tops.push_back(t);
    rank(tops);
  }
  out.measured = out.kernels > 0;
  if (!out.measured)
    out.reason = "the profiler recorded no kernels in the profiled window" +
                 (dropped > 0 ? " (" + std::to_string(dropped) + " records with timestamps outside the trace left out)"
                              : std::string());
  return out;
}

}  // namespace trainbench
