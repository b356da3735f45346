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
  const std::string names[] = {fusion_bn_relu, fusion_bn_add_relu, fusion_downsample_bn};
  fusion_outcome out;
  auto none = [&](const std::string& why) {
    for (const std::string& n : names) out.ineffective.push_back(n + ": " + why);
    return out;
  };
  if (request.device.is_cpu()) {
    if (!request.cpu_reference) return none("no fused kernel on the CPU; the unfused ops run");
    model->set_batch_norm_ops(reference_batch_norm_ops(true, true, true));
    for (const std::string& n : names) out.applied.push_back(n + " (CPU reference ops)");
    return out;
  }
  if (!request.device.is_cuda()) return none("no fused kernel on " + request.device.str());
  if (!request.channels_last)
    return none("cuDNN's fused batch norm runs NHWC only (this run is NCHW: set channels_last)");
  at::ScalarType dtype = at::kFloat;
  if (request.amp == amp_mode::fp16) dtype = at::kHalf;
  if (request.amp == amp_mode::bf16) dtype = at::kBFloat16;
  if (request.amp == amp_mode::off) {
    const auto params = model->parameters();
    if (!params.empty()) dtype = params.front().scalar_type();
    if (dtype != at::kFloat) return none(std::string("no cuDNN fusion in ") + dtype_name(dtype));
  }
  const cudnn_fusion_probe probe = probe_cudnn_batch_norm(request.device, dtype);
  const cudnn_fusion_check* checks[] = {&probe.bn_relu, &probe.bn_add_relu, &probe.batch_norm};
  bool any = false;
  for (int i = 0; i < 3; ++i) {
    const cudnn_fusion_check& c = *checks[i];
    any = any || c.works;
    if (c.works)
      out.applied.push_back(names[i] + " (cuDNN graph, NHWC, " + dtype_name(dtype) +
                            (c.unbias ? "; its biased running variance made unbiased" : "") + ")");
    else
      out.ineffective.push_back(names[i] + ": " + c.why);
  }
  if (any) model->set_batch_norm_ops(cudnn_batch_norm_ops(request.device, dtype, probe));
  return out;
}

}  // namespace trainbench
