#pragma once
// How trainbench builds and runs cuDNN frontend graphs, shared by the fused batch norm
// (cudnn_batch_norm.cpp) and the convolution fusions' measurement (cudnn_conv_fusion.cpp): cuDNN
// loaded from the libcudnn.so.9 torch has loaded, one rule for what counts as cuDNN declining a
// graph, plans built by heuristics, each run on the current stream with its workspace from the
// caching allocator. Only for sources built with the frontend's headers
// (TRAINBENCH_HAVE_CUDNN_FRONTEND, see lib/CMakeLists.txt).
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace trainbench::cudnn_graph {

namespace fe = cudnn_frontend;
using attr = std::shared_ptr<fe::graph::Tensor_attributes>;

// Loads cuDNN for the frontend (once; throws why it cannot, every call).
void load_cudnn();

// The frontend's type of a half, bfloat16 or float tensor; throws for any other.
fe::DataType_t fe_type(at::ScalarType t);

// What cuDNN answers when it does not take a graph: only this may be remembered as a shape's
// refusal; any other error (out of memory, a driver error) goes on up.
struct cudnn_refused : std::runtime_error {
  cudnn_refused(const std::string& what, bool named) : std::runtime_error(what), named_status(named) {}
  bool named_status;  // cuDNN named a declining status; else only the frontend's code says so
};

// Whether a frontend error is cuDNN declining the graph (its pattern, shape, dtype, or no engine
// that builds), rather than a failure of this process (memory, the driver, a bug of ours).
bool is_refusal(const fe::error_t& status);

// Building a graph: a refusal throws cudnn_refused, anything else std::runtime_error.
void check(fe::error_t status, const char* what);
// Running a built plan: no failure there is a refusal.
void check_run(fe::error_t status, const char* what);

// validate, the operation graph, heuristics A then FALLBACK, the support check, the plans: the
// first that builds, or with all_plans every one that builds (for autotune).
void build(fe::graph::Graph& g, cudnnHandle_t handle, bool all_plans = false);

// Times every plan of g (built with all_plans) on this pack, as cudnn.benchmark times a
// convolution's algorithms, makes the fastest g's plan and returns its workspace size. Runs g
// many times and synchronises the device: before any timed or captured work.
std::int64_t autotune(fe::graph::Graph& g, cudnnHandle_t handle, std::unordered_map<attr, void*>& pack,
                      const at::Tensor& like);

// Executes g on the current CUDA stream, its workspace taken from the caching allocator (a CUDA
// graph's pool during capture) on like's device.
void run(const fe::graph::Graph& g, cudnnHandle_t handle, std::int64_t workspace_bytes,
         std::unordered_map<attr, void*>& pack, const at::Tensor& like);

std::string first_line(const std::string& s);

}  // namespace trainbench::cudnn_graph
