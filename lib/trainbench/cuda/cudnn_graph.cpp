#if TRAINBENCH_HAVE_CUDNN_FRONTEND
#include "trainbench/cuda/cudnn_graph.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <dlfcn.h>
#include <link.h>    // link_map, for dlinfo
#include <stdlib.h>  // setenv

#include "trainbench/model/cudnn_refusal.hpp"

// The frontend is built with dynamic loading: it finds cuDNN's functions in this handle, the
// libcudnn.so.9 torch has loaded already, so the binary itself needs no libcudnn at link or load time.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace trainbench::cudnn_graph {

void load_cudnn() {
  static const std::string failed = [] {
    // The frontend opens a CUDA runtime of its own by name: without this, the first of
    // libcudart.so.12 and .13 the loader finds, so a host with both gives it a second runtime with
    // its own current device. It is given the file of the runtime this process has loaded (torch's
    // soname, which the binary links too), asked of the loader by soname: dladdr of one of its
    // functions would name the executable's PLT stub in a build without PIE. A name the user set wins.
    std::string runtime = "libcudart.so.13";
    if (void* loaded = dlopen(runtime.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      link_map* map = nullptr;
      if (dlinfo(loaded, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0] == '/')
        runtime = map->l_name;
      dlclose(loaded);
    }
    ::setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", runtime.c_str(), 0);
    void* h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcudnn.so.9", RTLD_NOW);
    if (!h) return std::string("cannot load libcudnn.so.9: ") + dlerror();
    fe::cudnn_dlhandle = h;
    return std::string();
  }();
  if (!failed.empty()) throw std::runtime_error(failed);
}

fe::DataType_t fe_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return fe::DataType_t::HALF;
    case at::kBFloat16:
      return fe::DataType_t::BFLOAT16;
    case at::kFloat:
      return fe::DataType_t::FLOAT;
    default:
      throw std::runtime_error(std::string("no cuDNN fusion in ") + c10::toString(t));
  }
}

// The frontend folds a failed plan build into GRAPH_EXECUTION_PLAN_CREATION_FAILED, and a backend
// call's failure into CUDNN_BACKEND_API_FAILED, each with cuDNN's status in the message
// ("... cudnn_status: CUDNN_STATUS_...", "... and code: CUDNN_STATUS_..."): where statuses are
// named, every one must decline (model/cudnn_refusal.hpp, the Ex call's rule too). Where none is
// (the engine search reports only "No valid engine configs"), the frontend's code decides, and
// the caller (the fused batch norm's graph_cache::refusal) builds once more before it believes it.
bool is_refusal(const fe::error_t& status) {
  const std::string& m = status.err_msg;
  const auto says = [&m](const char* what) { return m.find(what) != std::string::npos; };
  if (says("ALLOCATION_FAILED") || says("EXECUTION_FAILED") || says("out of memory")) return false;
  const cudnn_status_names named = judge_cudnn_status_names(m);
  if (named == cudnn_status_names::failure) return false;
  using code = fe::error_code_t;
  switch (status.code) {
    case code::GRAPH_NOT_SUPPORTED:
    case code::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
    case code::HEURISTIC_QUERY_FAILED:
    case code::ATTRIBUTE_NOT_SET:
    case code::SHAPE_DEDUCTION_FAILED:
    case code::UNSUPPORTED_GRAPH_FORMAT:
    case code::INVALID_VALUE:
    case code::NVRTC_COMPILATION_FAILED:  // a runtime-fusion engine this host cannot compile
      return true;
    case code::CUDNN_BACKEND_API_FAILED:
      return named == cudnn_status_names::decline;
    default:
      return false;
  }
}

void check(fe::error_t status, const char* what) {
  if (!status.is_bad()) return;
  const std::string text = std::string("cuDNN ") + what + ": " + status.get_message();
  if (is_refusal(status))
    throw cudnn_refused(text, judge_cudnn_status_names(status.err_msg) == cudnn_status_names::decline);
  throw std::runtime_error(text);
}

void check_run(fe::error_t status, const char* what) {
  if (status.is_bad()) throw std::runtime_error(std::string("cuDNN ") + what + ": " + status.get_message());
}

void build(fe::graph::Graph& g, cudnnHandle_t handle, bool all_plans) {
  check(g.validate(), "validate");
  check(g.build_operation_graph(handle), "build_operation_graph");
  check(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "create_execution_plans");
  check(g.check_support(handle), "check_support");
  check(g.build_plans(handle, all_plans ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE),
        "build_plans");
}

std::int64_t autotune(fe::graph::Graph& g, cudnnHandle_t handle, std::unordered_map<attr, void*>& pack,
                      const at::Tensor& like) {
  const cudnnStatus_t s = fe::detail::set_stream(handle, at::cuda::getCurrentCUDAStream());
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string("cudnnSetStream: ") + fe::detail::get_error_string(s));
  const std::int64_t bytes = g.get_autotune_workspace_size();
  at::Tensor workspace;
  if (bytes > 0) workspace = at::empty({bytes}, like.options().dtype(at::kByte));
  check_run(g.autotune(handle, pack, bytes > 0 ? workspace.data_ptr() : nullptr), "autotune");
  std::int64_t chosen = 0;
  check_run(g.get_workspace_size(chosen), "get_workspace_size");
  return chosen;
}

std::string first_line(const std::string& s) {
  const auto end = s.find('\n');
  return end == std::string::npos ? s : s.substr(0, end);
}

void run(const fe::graph::Graph& g, cudnnHandle_t handle, std::int64_t workspace_bytes,
         std::unordered_map<attr, void*>& pack, const at::Tensor& like) {
  const cudnnStatus_t s = fe::detail::set_stream(handle, at::cuda::getCurrentCUDAStream());
  if (s != CUDNN_STATUS_SUCCESS) throw std::runtime_error(std::string("cudnnSetStream: ") + fe::detail::get_error_string(s));
  at::Tensor workspace;
  if (workspace_bytes > 0) workspace = at::empty({workspace_bytes}, like.options().dtype(at::kByte));
  check_run(g.execute(handle, pack, workspace_bytes > 0 ? workspace.data_ptr() : nullptr), "execute");
}

}  // namespace trainbench::cudnn_graph

#endif
