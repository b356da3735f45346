#include "trainbench/model/fusion.hpp"

#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>
#include <torch/utils.h>

#include <set>
#include <tuple>

#include "trainbench/cuda/cudnn_batch_norm.hpp"
#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/util/error.hpp"

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

// Runs the unfused ops and notes each call.
class recording_ops final : public batch_norm_ops {
 public:
  std::vector<batch_norm_site> sites;
  torch::Tensor bn_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    note(batch_norm_kind::bn_relu, bn, x);
    return unfused_->bn_relu(bn, x);
  }
  torch::Tensor bn_add_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& residual) override {
    note(batch_norm_kind::bn_add_relu, bn, x);
    return unfused_->bn_add_relu(bn, x, residual);
  }
  torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    note(batch_norm_kind::plain, bn, x);
    return unfused_->batch_norm(bn, x);
  }

 private:
  void note(batch_norm_kind k, torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) {
    sites.push_back({k, &bn, x.sizes().vec()});
  }
  std::shared_ptr<batch_norm_ops> unfused_ = unfused_batch_norm_ops();
};

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out;
  for (std::int64_t d : s) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

// Per fusion (batch_norm_kind's order): how many distinct shapes the model's fusable batch norms
// have, and "<shape>: <why>" for each cuDNN refuses.
struct shape_check {
  int shapes[3] = {0, 0, 0};
  std::vector<std::string> refused[3];
};

shape_check check_shapes(resnet& model, const std::vector<std::int64_t>& input_shape, at::ScalarType dtype,
                         const cudnn_fusion_check* const checks[3]) {
  shape_check out;
  std::set<std::tuple<int, std::vector<std::int64_t>, double, double>> seen;
  for (const batch_norm_site& s : batch_norm_sites(model, input_shape)) {
    const int k = static_cast<int>(s.kind);
    std::int64_t numel = 1;
    for (std::int64_t d : s.shape) numel *= d;
    if (!checks[k]->works || !fusable(*s.bn) || !cudnn_batch_norm_fits(numel)) continue;  // the ops run it unfused
    if (!seen.emplace(k, s.shape, s.bn->options.eps(), *s.bn->options.momentum()).second) continue;
    ++out.shapes[k];
    const std::string why = cudnn_batch_norm_refusal(*s.bn, s.shape, dtype, s.kind != batch_norm_kind::plain,
                                                     s.kind == batch_norm_kind::bn_add_relu, *checks[k]);
    if (!why.empty()) out.refused[k].push_back(shape_text(s.shape) + ": " + why);
  }
  return out;
}

}  // namespace

fusion_dtype fusion_activation_dtype(resnet& model, amp_mode amp) {
  fusion_dtype out;
  if (amp == amp_mode::fp16) out.type = at::kHalf;
  if (amp == amp_mode::bf16) out.type = at::kBFloat16;
  if (amp == amp_mode::off) {
    const auto params = model->parameters();
    if (!params.empty()) out.type = params.front().scalar_type();
  }
  out.name = dtype_name(out.type);
  // Without autocast the fused kernels see the model's dtype, float scale and shift only in float.
  if (amp == amp_mode::off && out.type != at::kFloat) out.why_not = "no cuDNN fusion in " + out.name;
  return out;
}

std::vector<batch_norm_site> batch_norm_sites(resnet& model, const std::vector<std::int64_t>& input_shape) {
  TB_ASSERT(input_shape.size() == 4, "batch_norm_sites: input_shape is N, C, H, W");
  const auto params = model->parameters();
  TB_ASSERT(!params.empty(), "batch_norm_sites: the model has no parameters");
  const std::shared_ptr<batch_norm_ops> before = model->batch_norm_ops_in_use();
  const bool training = model->is_training();
  auto recorder = std::make_shared<recording_ops>();
  auto restore = [&] {
    model->set_batch_norm_ops(before);
    model->train(training);
  };
  model->set_batch_norm_ops(recorder);
  model->eval();  // the running statistics stay as they are
  try {
    const torch::NoGradGuard no_grad;
    const at::Tensor x = at::zeros({1, input_shape[1], input_shape[2], input_shape[3]}, params.front().options());
    model->forward(x.contiguous(at::MemoryFormat::ChannelsLast));
  } catch (...) {
    restore();
    throw;
  }
  restore();
  for (batch_norm_site& s : recorder->sites) s.shape[0] = input_shape[0];
  return std::move(recorder->sites);
}

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
  const fusion_dtype activations = fusion_activation_dtype(model, request.amp);
  if (!activations.why_not.empty()) return none(activations.why_not);
  const at::ScalarType dtype = activations.type;
  const cudnn_fusion_probe probe = probe_cudnn_batch_norm(request.device, dtype, request.route);
  const cudnn_fusion_check* const checks[] = {&probe.bn_relu, &probe.bn_add_relu, &probe.batch_norm};
  const bool any = probe.bn_relu.works || probe.bn_add_relu.works || probe.batch_norm.works;
  shape_check shapes;
  if (any && !request.input_shape.empty()) shapes = check_shapes(model, request.input_shape, dtype, checks);
  for (int i = 0; i < 3; ++i) {
    const cudnn_fusion_check& c = *checks[i];
    const std::vector<std::string>& refused = shapes.refused[i];
    const int total = shapes.shapes[i], n = static_cast<int>(refused.size());
    if (!c.works) {
      out.ineffective.push_back(names[i] + ": " + c.why);
    } else if (total > 0 && n == total) {
      out.ineffective.push_back(names[i] + ": cuDNN refuses every shape of this model and batch (" + refused.front() +
                                (n > 1 ? "; and " + std::to_string(n - 1) + " more" : "") + ")");
    } else {
      out.applied.push_back(
          names[i] + (c.ex_call ? " (cuDNN batch-norm Ex call, NHWC, " : " (cuDNN graph, NHWC, ") + dtype_name(dtype) +
          (c.relu_from_output ? "; the ReLU's gradient from its output, not a bit mask" : "") +
          (c.unbias ? "; its biased running variance made unbiased" : "") +
          (n > 0 ? "; " + std::to_string(n) + " of " + std::to_string(total) + " shapes unfused" : "") + ")");
      for (const std::string& r : refused)
        out.ineffective.push_back(names[i] + ": cuDNN refuses " + r + "; unfused there");
    }
  }
  if (any) model->set_batch_norm_ops(cudnn_batch_norm_ops(request.device, dtype, probe));
  return out;
}

void prepare_fusions(c10::Device device) {
  if (device.is_cuda()) prepare_cudnn_batch_norm();
}

}  // namespace trainbench
