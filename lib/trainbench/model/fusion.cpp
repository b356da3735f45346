#include "trainbench/model/fusion.hpp"

#include <c10/core/ScalarType.h>

#include "trainbench/cuda/cudnn_batch_norm.hpp"
#include "trainbench/model/batch_norm_op.hpp"

namespace trainbench {

namespace {

const char* dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return "fp16";
    case at::kBFloat16:
      return "bf16";
    case at::kDouble:
      return "fp64";
    default:
      return "fp32";
  }
}

}  // namespace

fusion_outcome fuse_batch_norm(resnet& model, const fusion_request& request) {
  const std::string relu = fusion_bn_relu, add = fusion_bn_add_relu;
  fusion_outcome out;
  auto neither = [&](const std::string& why) {
    out.ineffective = {relu + ": " + why, add + ": " + why};
    return out;
  };
  if (request.device.is_cpu()) {
    if (!request.cpu_reference) return neither("no fused kernel on the CPU; the unfused ops run");
    model->set_batch_norm_ops(reference_batch_norm_ops(true, true));
    out.applied = {relu + " (CPU reference ops)", add + " (CPU reference ops)"};
    return out;
  }
  if (!request.device.is_cuda()) return neither("no fused kernel on " + request.device.str());
  if (!request.channels_last)
    return neither("cuDNN's fused batch norm runs NHWC only (this run is NCHW: set channels_last)");
  at::ScalarType dtype = at::kFloat;
  if (request.amp == amp_mode::fp16) dtype = at::kHalf;
  if (request.amp == amp_mode::bf16) dtype = at::kBFloat16;
  if (request.amp == amp_mode::off) {
    const auto params = model->parameters();
    if (!params.empty()) dtype = params.front().scalar_type();
    if (dtype != at::kFloat) return neither(std::string("no cuDNN fusion in ") + dtype_name(dtype));
  }
  const cudnn_fusion_probe probe = probe_cudnn_batch_norm(request.device, dtype);
  auto how = [&](bool unbias) {
    return std::string(" (cuDNN graph, NHWC, ") + dtype_name(dtype) +
           (unbias ? "; its biased running variance made unbiased" : "") + ")";
  };
  if (probe.bn_relu)
    out.applied.push_back(relu + how(probe.bn_relu_unbias));
  else
    out.ineffective.push_back(relu + ": " + probe.bn_relu_why);
  if (probe.bn_add_relu)
    out.applied.push_back(add + how(probe.bn_add_relu_unbias));
  else
    out.ineffective.push_back(add + ": " + probe.bn_add_relu_why);
  if (probe.bn_relu || probe.bn_add_relu)
    model->set_batch_norm_ops(cudnn_batch_norm_ops(request.device, dtype, probe));
  return out;
}

}  // namespace trainbench
