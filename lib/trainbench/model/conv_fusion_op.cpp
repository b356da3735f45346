#include "trainbench/model/conv_fusion_op.hpp"

#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <string>
#include <utility>

#include "trainbench/cuda/cudnn_conv_fusion.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

conv_geometry geometry_of(const torch::nn::Conv2dImpl& conv) {
  const auto& o = conv.options;
  return {(*o.stride())[0], std::get<torch::ExpandingArray<2>>(o.padding())->at(0)};
}

// The op's non-tensor inputs.
struct pair_args {
  std::shared_ptr<conv_fusion_kernels> kernels;
  torch::nn::BatchNorm2dImpl* bn = nullptr;
  conv_geometry g;
};

// The kernels in the autograd context until backward has run: whatever replaces the model's ops
// in between, backward runs on what forward ran on.
struct kernels_holder : torch::CustomClassHolder {
  explicit kernels_holder(std::shared_ptr<conv_fusion_kernels> k) : kernels(std::move(k)) {}
  std::shared_ptr<conv_fusion_kernels> kernels;
};

// Differentiable in x, gamma, beta and w; y's statistics are outputs without a gradient.
class bn_relu_conv_function : public torch::autograd::Function<bn_relu_conv_function> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& gamma,
                               const at::Tensor& beta, const at::Tensor& w, const at::Tensor& sum,
                               const at::Tensor& sq_sum, const pair_args* a) {
    // The kernels take their inputs' dtypes as given: no autocast cast inside.
    const c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    conv_fusion_kernels& k = *a->kernels;  // held by the caller for this call
    const std::int64_t count = x.numel() / x.size(1);
    const double eps = a->bn->options.eps();
    const bn_finalized f =
        sum.numel() > 0 ? k.finalize(sum, sq_sum, count, gamma, beta, eps) : k.statistics(x, gamma, beta, eps);
    k.update_running(*a->bn, f, count);
    const conv_genstats out = k.forward(x, f, w, a->g);
    ctx->save_for_backward({x, gamma, beta, w, f.mean, f.inv_std, f.eq_scale, f.eq_bias});
    ctx->saved_data["kernels"] = at::IValue::make_capsule(c10::make_intrusive<kernels_holder>(a->kernels));
    ctx->saved_data["stride"] = a->g.stride;
    ctx->saved_data["padding"] = a->g.padding;
    ctx->mark_non_differentiable({out.sum, out.sq_sum});
    ctx->set_materialize_grads(false);  // no zero gradients made for the statistics
    return {out.y, out.sum, out.sq_sum};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return variable_list(7);  // y reached no loss
    const variable_list s = ctx->get_saved_variables();
    const at::Tensor &x = s[0], &gamma = s[1], &beta = s[2], &w = s[3];
    const bn_finalized f{s[4], s[5], s[6], s[7]};
    conv_fusion_kernels& k =
        *c10::static_intrusive_pointer_cast<kernels_holder>(ctx->saved_data["kernels"].toCapsule())->kernels;
    const conv_geometry g{ctx->saved_data["stride"].toInt(), ctx->saved_data["padding"].toInt()};
    // The fused kernels read dy in x's layout and dtype (autograd may hand another layout).
    const at::Tensor dy = grads[0].to(x.scalar_type()).contiguous(x.suggest_memory_format());
    const conv_fusion_gradients d = k.backward(dy, w, x, f, gamma, beta, g);
    return {d.dx, d.dgamma.to(gamma.scalar_type()), d.dbeta.to(beta.scalar_type()), d.dw, {}, {}, {}};
  }
};

class conv_fused_ops final : public batch_norm_ops {
 public:
  conv_fused_ops(std::shared_ptr<batch_norm_ops> inner, conv_fusion_plans plans)
      : inner_(std::move(inner)), plans_(std::move(plans)) {}
  torch::Tensor bn_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    return inner_->bn_relu(bn, x);
  }
  torch::Tensor bn_add_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& residual) override {
    return inner_->bn_add_relu(bn, x, residual);
  }
  torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    return inner_->batch_norm(bn, x);
  }
  conv_output bn_relu_conv(torch::nn::BatchNorm2dImpl& bn, torch::nn::Conv2dImpl& conv,
                           const conv_output& in) override {
    const auto it = plans_.find(&conv);
    if (it == plans_.end() || !fits(it->second, bn, in.y)) return inner_->bn_relu_conv(bn, conv, in);
    return fused_bn_relu_conv(it->second.kernels, bn, conv, in);
  }

 private:
  // Eval mode, another batch size, dtype, layout or eps: the plan's kernels were not built for it
  // (sized kernels take float scale and shift).
  static bool fits(const conv_fusion_plan& plan, const torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x) {
    if (!fusable(bn)) return false;
    if (plan.input.empty()) return true;
    return x.sizes() == at::IntArrayRef(plan.input) && x.scalar_type() == plan.dtype &&
           x.is_contiguous(at::MemoryFormat::ChannelsLast) && bn.weight.scalar_type() == at::kFloat &&
           bn.options.eps() == plan.eps;
  }
  std::shared_ptr<batch_norm_ops> inner_;
  conv_fusion_plans plans_;
};

std::string first_line_of(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string shape_text(const conv_fusion_shape& s) {
  return std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" + std::to_string(s.w) +
         " into " + std::to_string(s.k) + " channels, " + std::to_string(s.r) + "x" + std::to_string(s.r) + " stride " +
         std::to_string(s.g.stride);
}

// cuDNN's graphs for every shape of the model's pairs; what could not be built or was wrong, per shape.
struct cuda_plans {
  conv_fusion_plans plans;
  std::vector<std::string> unfused;  // "<shape>: <why>"
  std::size_t sites = 0;
};

cuda_plans plan_on_cuda(resnet& model, const std::vector<std::int64_t>& input_shape, at::ScalarType dtype) {
  cuda_plans out;
  const std::vector<conv_fusion_site> sites = conv_fusion_sites(model, input_shape);
  out.sites = sites.size();
  std::map<std::string, const conv_fusion_site*> by_name;
  for (const conv_fusion_site& s : sites) by_name[s.name] = &s;
  for (const conv_fusion_group& group : conv_fusion_groups(sites, dtype)) {
    conv_fusion_build built;
    std::string why;
    try {
      built = build_cudnn_conv_fusion(group.shape, group.conv->weight);
      why =
          !built.refused.empty() ? "cuDNN refuses it: " + built.refused : "differs from the reference: " + built.wrong;
    } catch (const std::exception& e) {  // not a refusal: building or checking failed (memory, say)
      why = std::string("failed: ") + first_line_of(e.what());
    }
    if (!built.kernels) {
      out.unfused.push_back(shape_text(group.shape) + " (" + std::to_string(group.layers.size()) + " pairs): " + why);
      continue;
    }
    for (const std::string& name : group.layers) {
      const conv_fusion_site& site = *by_name.at(name);
      out.plans[site.conv] = {built.kernels, site.input, dtype, group.shape.eps};
    }
  }
  return out;
}

}  // namespace

conv_output fused_bn_relu_conv(const std::shared_ptr<conv_fusion_kernels>& kernels, torch::nn::BatchNorm2dImpl& bn,
                               torch::nn::Conv2dImpl& conv, const conv_output& in) {
  const pair_args a{kernels, &bn, geometry_of(conv)};
  const at::Tensor w = conv.weight.to(in.y.scalar_type()).contiguous(in.y.suggest_memory_format());
  // Autograd takes no undefined input: no statistics are passed as empty tensors (no memory, no kernel).
  const at::Tensor none = in.sum.defined() ? at::Tensor() : at::empty({0}, in.y.options().dtype(at::kFloat));
  const variable_list out = bn_relu_conv_function::apply(in.y, bn.weight, bn.bias, w, in.sum.defined() ? in.sum : none,
                                                         in.sq_sum.defined() ? in.sq_sum : none, &a);
  return {out[0], out[1], out[2]};
}

std::shared_ptr<batch_norm_ops> conv_fusion_ops(std::shared_ptr<batch_norm_ops> inner, conv_fusion_plans plans) {
  TB_ASSERT(inner != nullptr, "conv_fusion_ops: no inner ops");
  return std::make_shared<conv_fused_ops>(std::move(inner), std::move(plans));
}

fusion_outcome fuse_convolutions(resnet& model, const fusion_request& request) {
  fusion_outcome out;
  const std::string name = fusion_bn_relu_conv;
  auto none = [&](const std::string& why) {
    out.ineffective.push_back(name + ": " + why);
    return out;
  };
  if (request.device.is_cpu() && !request.cpu_reference) return none("no fused kernel on the CPU; the unfused ops run");
  if (!request.device.is_cpu() && !request.device.is_cuda()) return none("no fused kernel on " + request.device.str());
  TB_ASSERT(request.input_shape.size() == 4, "fuse_convolutions: input_shape is N, C, H, W");
  if (request.device.is_cpu()) {
    conv_fusion_plans plans;
    for (const conv_fusion_site& s : conv_fusion_sites(model, request.input_shape))
      plans[s.conv] = {reference_conv_fusion_kernels(), {}, at::kFloat};
    if (plans.empty()) return none("the model has no batch norm whose ReLU feeds only a plain convolution");
    out.applied.push_back(name + " (CPU reference ops, " + std::to_string(plans.size()) + " pairs)");
    model->set_batch_norm_ops(conv_fusion_ops(model->batch_norm_ops_in_use(), std::move(plans)));
    return out;
  }
  if (!request.channels_last)
    return none("cuDNN's convolution fusions run NHWC only (this run is NCHW: set model.channels_last)");
  const fusion_dtype dtype = fusion_activation_dtype(model, request.amp);
  if (!dtype.why_not.empty()) return none(dtype.why_not);
  cuda_plans p = plan_on_cuda(model, request.input_shape, dtype.type);
  if (p.sites == 0) return none("the model has no batch norm whose ReLU feeds only a plain convolution");
  if (p.plans.empty()) return none("no shape of this model and batch runs fused (" + p.unfused.front() + ")");
  out.applied.push_back(name + " (cuDNN graphs, NHWC, " + dtype.name + "; " + std::to_string(p.plans.size()) + " of " +
                        std::to_string(p.sites) + " pairs)");
  for (const std::string& u : p.unfused) out.ineffective.push_back(name + ": " + u + "; unfused there");
  model->set_batch_norm_ops(conv_fusion_ops(model->batch_norm_ops_in_use(), std::move(p.plans)));
  return out;
}

}  // namespace trainbench
