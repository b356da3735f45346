#pragma once
// Each kernel family's share of a training step's device time: convolution, normalisation and
// activation (batch norm, ReLU, the residual add), optimizer (SGD, loss-scale unscaling), other.
// Read from the profiler's kernel records in a window of its own after the measured ones, so
// that choosing the next optimisation starts from data. The runner owns the recorder; stages
// never see it.
#include <memory>
#include <string>
#include <vector>

#include "trainbench/report/run_result.hpp"

namespace trainbench {

enum class kernel_family { convolution, norm_activation, optimizer, other };
constexpr int kernel_family_count = 4;
const char* kernel_family_name(kernel_family f);  // as in the report: convolution, norm_activation, ...

// By the kernel's name (cuDNN's, cuBLAS's and ATen's, as CUPTI reports them), lower-cased and
// searched for the markers listed in kernel_families.cpp; what matches none is `other`.
kernel_family classify_kernel(const std::string& name);
// A copy between host and device: the input's transfer, not the step's work (left out).
bool host_device_copy(const std::string& name);

// One kernel as the profiler reports it.
struct kernel_record {
  std::string name;
  double seconds = 0;
};
// Sums records by family over `batches` profiled batches, and ranks each family's kernel names by
// time (the top kernel_tops); `dropped` records the recorder could not use are reported beside.
kernel_family_result sum_kernel_families(const std::vector<kernel_record>& records, int batches,
                                         const std::string& source, std::int64_t dropped = 0);
// For the run's summary: the kernel time per batch and each family's share, then the longest
// kernel of the largest family (its name cut to 80 characters); empty lines where not measured.
std::vector<std::string> describe_kernel_families(const kernel_family_result& k);
// Merges ranked names (a pooled report): times and counts of one name add up, the top kept.
void merge_kernel_tops(std::vector<kernel_top>& into, const std::vector<kernel_top>& more);

class kernel_recorder {
 public:
  virtual ~kernel_recorder() = default;
  virtual void start() = 0;
  // Waits for the device, stops recording and reads what the `batches` batches ran.
  virtual kernel_family_result stop(int batches) = 0;
};

// CUDA kernels through PyTorch's profiler (Kineto on CUPTI): records only, no host sync until stop().
std::unique_ptr<kernel_recorder> make_kineto_recorder(int device);

}  // namespace trainbench
