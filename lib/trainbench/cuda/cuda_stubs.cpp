// Built only when LibTorch has no CUDA: every entry point says so.
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cudnn_batch_norm.hpp"
#include "trainbench/cuda/cudnn_batch_norm_ex.hpp"
#include "trainbench/cuda/cudnn_conv_fusion.hpp"
#include "trainbench/distributed/c10d_state.hpp"
#include "trainbench/measure/kernel_families.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {
namespace {
[[noreturn]] void no_cuda() { throw run_error("no_cuda", "this trainbench was built against a LibTorch without CUDA"); }
}  // namespace

bool cuda_code_compiled() { return false; }
std::string cuda_device_name(c10::Device) { no_cuda(); }
cuda_device_facts cuda_device_info(c10::Device) { no_cuda(); }
std::unique_ptr<transfer_stage> make_cuda_transfer(c10::Device, const transfer_config&, bool) { no_cuda(); }
std::unique_ptr<stage_clock> make_cuda_clock(c10::Device, const transfer_stage*) { no_cuda(); }
std::unique_ptr<device_probe> make_cuda_probe(c10::Device) { no_cuda(); }
void make_device_current(c10::Device) { no_cuda(); }
std::unique_ptr<train_step> make_graph_step(resnet, const step_options&, const std::vector<std::int64_t>&, bool) {
  no_cuda();
}
std::int64_t search_batch_size(const batch_search_request&, std::vector<std::pair<std::int64_t, bool>>&) { no_cuda(); }
cuda_versions cuda_library_versions() { return {}; }
std::unique_ptr<kernel_recorder> make_kineto_recorder(int) { no_cuda(); }
std::unique_ptr<transfer_stage> make_nvjpeg_transfer(c10::Device, const nvjpeg_options&, std::string& why) {
  why = "this trainbench was built against a LibTorch without CUDA";
  return nullptr;
}
cudnn_fusion_probe probe_cudnn_batch_norm(c10::Device, at::ScalarType, fused_bn_route) {
  const char* why = "this trainbench was built against a LibTorch without CUDA";
  cudnn_fusion_probe p;
  for (cudnn_fusion_check* c : {&p.bn_relu, &p.bn_add_relu, &p.batch_norm}) c->why = why;
  return p;
}
std::shared_ptr<batch_norm_ops> cudnn_batch_norm_ops(c10::Device, at::ScalarType, const cudnn_fusion_probe&) {
  no_cuda();
}
std::string cudnn_batch_norm_graph_check(at::ScalarType, bool, bool, bool, at::IntArrayRef) {
  return "this trainbench was built against a LibTorch without CUDA";
}
std::string cudnn_conv_fusion::check_graphs(const conv_fusion_shape&) {
  return "this trainbench was built against a LibTorch without CUDA";
}
conv_fusion_timing time_conv_fusion(const conv_fusion_shape&, const at::Tensor&, batch_norm_ops&, int, int, bool) {
  no_cuda();
}
conv_fusion_build build_cudnn_conv_fusion(const conv_fusion_shape&, const at::Tensor&) {
  return {nullptr, "this trainbench was built against a LibTorch without CUDA", ""};
}
std::string cudnn_batch_norm_refusal(const torch::nn::BatchNorm2dImpl&, at::IntArrayRef, at::ScalarType, bool, bool,
                                     bool) {
  return "this trainbench was built against a LibTorch without CUDA";
}
std::string cudnn_batch_norm_refusal(const torch::nn::BatchNorm2dImpl&, at::IntArrayRef, at::ScalarType, bool, bool,
                                     const cudnn_fusion_check&) {
  return "this trainbench was built against a LibTorch without CUDA";
}
torch::Tensor cudnn_batch_norm_relu(torch::nn::BatchNorm2dImpl&, const torch::Tensor&, const torch::Tensor&, bool,
                                    bool) {
  no_cuda();
}
torch::Tensor cudnn_batch_norm(torch::nn::BatchNorm2dImpl&, const torch::Tensor&, bool) { no_cuda(); }
std::string cudnn_ex_unavailable(at::ScalarType) { return "this trainbench was built against a LibTorch without CUDA"; }
torch::Tensor cudnn_ex_batch_norm_relu(torch::nn::BatchNorm2dImpl&, const torch::Tensor&, const torch::Tensor&, bool) {
  no_cuda();
}
std::string cudnn_ex_refusal(const torch::nn::BatchNorm2dImpl&, at::IntArrayRef, at::ScalarType, bool) {
  return "this trainbench was built against a LibTorch without CUDA";
}
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int, int, c10::Device,
                                                    std::chrono::milliseconds) {
  no_cuda();
}

}  // namespace trainbench
