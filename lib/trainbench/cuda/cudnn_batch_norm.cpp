#include "trainbench/cuda/cudnn_batch_norm.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#if TRAINBENCH_HAVE_CUDNN_FRONTEND
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <torch/autograd.h>

#include "trainbench/cuda/cudnn_batch_norm_ex.hpp"
#include "trainbench/cuda/cudnn_graph.hpp"
#include "trainbench/util/log.hpp"

#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#endif

#if TRAINBENCH_HAVE_CUDNN_FRONTEND

namespace trainbench {
namespace {
using namespace cudnn_graph;

// One graph per problem: the handle is part of the key because a plan is executed with the handle
// of the thread that runs it (the forward on the step's thread, the backward on autograd's).
struct graph_key {
  cudnnHandle_t handle;
  at::ScalarType dtype;
  bool relu, add;  // add only with relu; neither: the plain batch norm
  // With relu, how the backward gets the ReLU's gradient: from a bit mask the forward writes
  // (true), or from the forward's output, saved (false; the forward writes no mask).
  bool mask;
  std::int64_t n, c, h, w;
  double eps, momentum;
  auto tied() const {
    return std::make_tuple(reinterpret_cast<std::uintptr_t>(handle), dtype, relu, add, mask, n, c, h, w, eps,
                           momentum);
  }
  bool operator<(const graph_key& o) const { return tied() < o.tied(); }
};

attr activation(fe::graph::Graph& g, const char* name, const graph_key& k, fe::DataType_t type) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({k.n, k.c, k.h, k.w})
                      .set_stride({k.c * k.h * k.w, 1, k.w * k.c, k.c})
                      .set_data_type(type));
}

attr per_channel(fe::graph::Graph& g, const char* name, const graph_key& k) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_dim({1, k.c, 1, 1})
                      .set_stride({k.c, 1, k.c, k.c})
                      .set_data_type(fe::DataType_t::FLOAT));
}

void start_graph(fe::graph::Graph& g, const graph_key& k) {
  g.set_io_data_type(fe_type(k.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
}

// The plan for k's handle and its workspace; with no handle, the frontend's own checks alone
// (cudnn_batch_norm_graph_check, on a host without a GPU).
void finish(fe::graph::Graph& g, const graph_key& k, std::int64_t& workspace) {
  if (!k.handle) return check(g.validate(), "validate");
  build(g, k.handle);
  check(g.get_workspace_size(workspace), "get_workspace_size");
}

// BnAddRelu: y = relu(bn(x) [+ residual]), mask = y > 0 (a bit per element; only in the mask form),
// the batch mean and inverse standard deviation, and the next running statistics. Without relu:
// y = bn(x), no mask.
struct forward_graph {
  fe::graph::Graph graph;
  attr x, scale, bias, residual, prev_mean, prev_var, y, mask, mean, inv_var, next_mean, next_var;
  std::int64_t workspace = 0;
};

std::unique_ptr<forward_graph> make_forward(const graph_key& k) {
  auto f = std::make_unique<forward_graph>();
  auto& g = f->graph;
  start_graph(g, k);
  const fe::DataType_t io = fe_type(k.dtype);
  f->x = activation(g, "x", k, io);
  f->scale = per_channel(g, "scale", k);
  f->bias = per_channel(g, "bias", k);
  f->prev_mean = per_channel(g, "running_mean", k);
  f->prev_var = per_channel(g, "running_var", k);
  attr eps = g.tensor(fe::graph::Tensor_attributes(static_cast<float>(k.eps)));
  attr momentum = g.tensor(fe::graph::Tensor_attributes(static_cast<float>(k.momentum)));
  auto options = fe::graph::Batchnorm_attributes().set_epsilon(eps).set_previous_running_stats(
      f->prev_mean, f->prev_var, momentum);
  auto [normed, mean, inv_var, next_mean, next_var] = g.batchnorm(f->x, f->scale, f->bias, options);
  for (const attr& t : {mean, inv_var, next_mean, next_var}) t->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  f->mean = mean;
  f->inv_var = inv_var;
  f->next_mean = next_mean;
  f->next_var = next_var;
  if (!k.relu) {
    f->y = normed;
    f->y->set_output(true).set_data_type(io);
    finish(g, k, f->workspace);
    return f;
  }
  attr pre = normed;
  if (k.add) {
    f->residual = activation(g, "residual", k, io);
    pre = g.pointwise(normed, f->residual, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  }
  f->y = g.pointwise(pre, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
  f->y->set_output(true).set_data_type(io);
  if (!k.mask) {  // the C++ samples' "SGBN Add Relu": the backward reads y instead
    finish(g, k, f->workspace);
    return f;
  }
  attr zero = g.tensor(fe::graph::Tensor_attributes(0.0f));
  f->mask = g.pointwise(f->y, zero,
                        fe::graph::Pointwise_attributes()
                            .set_mode(fe::PointwiseMode_t::CMP_GT)
                            .set_compute_data_type(fe::DataType_t::FLOAT));
  f->mask->set_output(true).set_data_type(fe::DataType_t::BOOLEAN);
  finish(g, k, f->workspace);
  return f;
}

// DReluForkDBn: g = dy * mask, or relu_backward(dy, y) from the forward's output in the other
// form (the residual's gradient, with add), then batch norm's backward. Without relu: batch norm's
// backward of dy.
struct backward_graph {
  fe::graph::Graph graph;
  attr dy, mask, y, x, scale, mean, inv_var, dx, dscale, dbias, d_residual;
  std::int64_t workspace = 0;
};

std::unique_ptr<backward_graph> make_backward(const graph_key& k) {
  auto b = std::make_unique<backward_graph>();
  auto& g = b->graph;
  start_graph(g, k);
  const fe::DataType_t io = fe_type(k.dtype);
  b->dy = activation(g, "dy", k, io);
  attr d_relu = b->dy;
  if (k.relu && k.mask) {
    b->mask = activation(g, "mask", k, fe::DataType_t::BOOLEAN);
    d_relu = g.pointwise(b->dy, b->mask, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
    d_relu->set_data_type(io);
  } else if (k.relu) {
    b->y = activation(g, "y", k, io);
    d_relu = g.pointwise(b->dy, b->y, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_BWD));
    d_relu->set_data_type(io);
  }
  if (k.add) {
    d_relu->set_output(true);
    b->d_residual = d_relu;
  }
  b->x = activation(g, "x", k, io);
  b->scale = per_channel(g, "scale", k);
  b->mean = per_channel(g, "mean", k);
  b->inv_var = per_channel(g, "inv_var", k);
  auto options = fe::graph::Batchnorm_backward_attributes().set_saved_mean_and_inv_variance(b->mean, b->inv_var);
  auto [dx, dscale, dbias] = g.batchnorm_backward(d_relu, b->x, b->scale, options);
  dx->set_output(true).set_data_type(io);
  dscale->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  dbias->set_output(true).set_data_type(fe::DataType_t::FLOAT);
  b->dx = dx;
  b->dscale = dscale;
  b->dbias = dbias;
  finish(g, k, b->workspace);
  return b;
}

std::string shape_text(const graph_key& k) {
  std::ostringstream os;
  os << k.n << "x" << k.c << "x" << k.h << "x" << k.w;
  return os.str();
}

std::string fusion_text(const graph_key& k) {
  if (!k.relu) return "batch norm";
  return std::string(k.add ? "batch norm + add + ReLU" : "batch norm + ReLU") +
         (k.mask ? " (bit mask)" : " (ReLU's gradient from its output)");
}

// The backward's graph of a forward's key: it does not depend on eps or momentum.
graph_key backward_key(graph_key k) {
  k.eps = 0.0;
  k.momentum = 0.0;
  return k;
}

// Graphs are built on first use and kept for the process. Building compiles kernels: never
// during a CUDA graph capture (the eager warm-up steps before a capture build them).
class graph_cache {
 public:
  static graph_cache& instance() {
    static graph_cache* cache = new graph_cache();  // never destroyed: plans outlive static teardown order
    return *cache;
  }
  const forward_graph& forward(const graph_key& k) { return get(forward_, k, make_forward); }
  const backward_graph& backward(const graph_key& k) { return get(backward_, k, make_backward); }

  // Every graph, plan and decision of a batch norm with one of these batch sizes.
  void forget(const std::vector<std::int64_t>& batches) {
    const auto listed = [&](const graph_key& k) {
      return std::find(batches.begin(), batches.end(), k.n) != batches.end();
    };
    const std::lock_guard<std::mutex> lock(mutex_);
    erase_if(decided_, listed);
    erase_if(forward_, listed);
    erase_if(backward_, listed);
  }

  // "" where cuDNN takes this fusion for k's shape, else why not. cuDNN takes a graph or not for
  // its shape, whatever the handle: so it is decided once per shape, by building the forward and
  // the backward graph's plans with this thread's handle (the forward's is the one a first step
  // uses; autograd's thread builds its own backward plan on first use). Its support check alone
  // would not do: from cuDNN 9.2 it checks an engine's memory needs, not that its plan builds.
  // A refusal is remembered and logged once; the ops run that shape unfused.
  std::string refusal(const graph_key& k) {
    graph_key shape = k;
    shape.handle = nullptr;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      const auto it = decided_.find(shape);
      if (it != decided_.end()) return it->second;
    }
    not_capturing(k);
    bool named = false;
    std::string why = build(k, named);
    if (!why.empty() && !named) {
      // cuDNN's refusal of a shape is the same every time; a failure inside its engine search (an
      // allocation there) can read as one, with no status named. So with the caching allocator's
      // free blocks given back, the graphs are built once more, and only a second refusal counts.
      // (emptyCache waits for the device: a cost only a refusal without a status pays.)
      c10::cuda::CUDACachingAllocator::emptyCache();
      why = build(k, named);
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto [it, added] = decided_.emplace(shape, why);
    if (added && !why.empty())
      log_warn("fused batch norm: cuDNN refuses " + fusion_text(k) + " for " + shape_text(k) + " in " +
               c10::toString(k.dtype) + " (" + why + "); batch norms of that shape run unfused");
    return it->second;
  }

 private:
  // "" where both of k's graphs build, else cuDNN's refusal (`named`: with a declining status
  // named); any other error goes on up.
  std::string build(const graph_key& k, bool& named) {
    try {
      forward(k);
      backward(backward_key(k));
      return std::string();
    } catch (const cudnn_refused& e) {
      named = e.named_status;
      return first_line(e.what());
    }
  }

  template <class Map, class Pred>
  static void erase_if(Map& m, Pred listed) {
    for (auto it = m.begin(); it != m.end();) it = listed(it->first) ? m.erase(it) : std::next(it);
  }

  static void not_capturing(const graph_key& k) {
    if (c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None) return;
    throw std::runtime_error("fused batch norm: a new shape " + shape_text(k) +
                             " during CUDA graph capture; its cuDNN graph must be built by an eager step first");
  }

  template <class G, class Make>
  const G& get(std::map<graph_key, std::unique_ptr<G>>& cache, const graph_key& k, Make make) {
    load_cudnn();  // before the frontend's first call, whichever entry point comes first
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = cache.find(k);
    if (it != cache.end()) return *it->second;
    not_capturing(k);
    return *cache.emplace(k, make(k)).first->second;
  }
  std::mutex mutex_;
  std::map<graph_key, std::unique_ptr<forward_graph>> forward_;
  std::map<graph_key, std::unique_ptr<backward_graph>> backward_;
  std::map<graph_key, std::string> decided_;  // by shape (no handle): "" or cuDNN's refusal
};

graph_key key_of(const at::Tensor& x, bool relu, bool add, bool mask, double eps, double momentum) {
  return {at::native::getCudnnHandle(), x.scalar_type(), relu, add, relu && mask, x.size(0), x.size(1), x.size(2),
          x.size(3), eps, momentum};
}

std::int64_t mask_bytes(std::int64_t numel) {
  // CUDNN_DATA_BOOLEAN is bit-packed, eight elements a byte; rounded up to 16 bytes.
  return ((numel + 7) / 8 + 15) / 16 * 16;
}

at::Tensor nhwc(const at::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); }

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor fused_forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight,
                         const at::Tensor& bias, const at::Tensor& residual_in, const at::Tensor& running_mean,
                         const at::Tensor& running_var, double eps, double momentum, bool relu, bool mask_form,
                         bool unbias) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = nhwc(x_in);
  const bool add = residual_in.defined();
  TORCH_CHECK(relu || !add, "fused batch norm: the residual add comes with the ReLU");
  const at::Tensor residual = add ? nhwc(residual_in.to(x.scalar_type())) : at::Tensor();
  const graph_key k = key_of(x, relu, add, mask_form, eps, momentum);
  const forward_graph& g = graph_cache::instance().forward(k);
  const auto f32 = x.options().dtype(at::kFloat);
  at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  at::Tensor mask = k.mask ? at::empty({mask_bytes(x.numel())}, x.options().dtype(at::kByte)) : at::Tensor();
  at::Tensor mean = at::empty({k.c}, f32), inv_var = at::empty({k.c}, f32);
  at::Tensor next_mean = at::empty({k.c}, f32), next_var = at::empty({k.c}, f32);
  const at::Tensor w = weight.contiguous(), b = bias.contiguous();
  std::unordered_map<attr, void*> pack = {
      {g.x, x.data_ptr()},           {g.scale, w.data_ptr()},          {g.bias, b.data_ptr()},
      {g.prev_mean, running_mean.data_ptr()}, {g.prev_var, running_var.data_ptr()}, {g.y, y.data_ptr()},
      {g.mean, mean.data_ptr()},     {g.inv_var, inv_var.data_ptr()},
      {g.next_mean, next_mean.data_ptr()},    {g.next_var, next_var.data_ptr()}};
  if (k.mask) pack[g.mask] = mask.data_ptr();
  if (add) pack[g.residual] = residual.data_ptr();
  run(g.graph, k.handle, g.workspace, pack, x);
  // Written beside, then copied: the graph reads the previous statistics while it writes the next.
  running_mean.copy_(next_mean);
  if (unbias)
    unbias_running_var(running_var, next_var, inv_var, eps, momentum, k.n * k.h * k.w);
  else
    running_var.copy_(next_var);
  // The output form keeps y itself (the next convolution keeps it alive anyway; saved as this
  // Function's output, autograd holds no extra reference cycle).
  if (relu && !k.mask)
    ctx->save_for_backward({x, weight, y});
  else
    ctx->save_for_backward({x, weight});
  ctx->saved_data["mean"] = mean;
  ctx->saved_data["inv_var"] = inv_var;
  ctx->saved_data["mask_form"] = k.mask;
  if (k.mask) ctx->saved_data["mask"] = mask;
  return y;
}

// inputs: how many arguments the Function's forward takes, tensors or not.
variable_list fused_backward(AutogradContext* ctx, const variable_list& grads, bool relu, bool add,
                             std::size_t inputs) {
  const variable_list saved = ctx->get_saved_variables();
  const at::Tensor& x = saved[0];
  const at::Tensor& weight = saved[1];
  if (!grads[0].defined()) return variable_list(inputs);
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor dy = nhwc(grads[0].to(x.scalar_type()));
  const bool mask_form = ctx->saved_data["mask_form"].toBool();
  const graph_key k = backward_key(key_of(x, relu, add, mask_form, 0.0, 0.0));
  const backward_graph& g = graph_cache::instance().backward(k);
  const auto f32 = x.options().dtype(at::kFloat);
  at::Tensor dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  at::Tensor dscale = at::empty({k.c}, f32), dbias = at::empty({k.c}, f32);
  at::Tensor d_residual = add ? at::empty_like(x, at::MemoryFormat::ChannelsLast) : at::Tensor();
  const at::Tensor mean = ctx->saved_data["mean"].toTensor(), inv_var = ctx->saved_data["inv_var"].toTensor();
  const at::Tensor mask = k.mask ? ctx->saved_data["mask"].toTensor() : at::Tensor();
  const at::Tensor w = weight.contiguous();
  std::unordered_map<attr, void*> pack = {
      {g.dy, dy.data_ptr()},     {g.x, x.data_ptr()},
      {g.scale, w.data_ptr()},   {g.mean, mean.data_ptr()},       {g.inv_var, inv_var.data_ptr()},
      {g.dx, dx.data_ptr()},     {g.dscale, dscale.data_ptr()},   {g.dbias, dbias.data_ptr()}};
  if (k.mask) pack[g.mask] = mask.data_ptr();
  if (relu && !k.mask) pack[g.y] = saved[2].data_ptr();
  if (add) pack[g.d_residual] = d_residual.data_ptr();
  run(g.graph, k.handle, g.workspace, pack, x);
  variable_list out = {dx, dscale, dbias};
  if (add) out.push_back(d_residual);
  out.resize(inputs);  // running_mean, running_var, eps, momentum, the flags: no gradient
  return out;
}

class bn_relu_function : public torch::autograd::Function<bn_relu_function> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var,
                            double eps, double momentum, bool mask_form, bool unbias) {
    return fused_forward(ctx, x, weight, bias, at::Tensor(), running_mean, running_var, eps, momentum, true,
                         mask_form, unbias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return fused_backward(ctx, grads, true, false, 9);
  }
};

class bn_function : public torch::autograd::Function<bn_function> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var,
                            double eps, double momentum, bool unbias) {
    return fused_forward(ctx, x, weight, bias, at::Tensor(), running_mean, running_var, eps, momentum, false, false,
                         unbias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return fused_backward(ctx, grads, false, false, 8);
  }
};

class bn_add_relu_function : public torch::autograd::Function<bn_add_relu_function> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& residual, const at::Tensor& running_mean,
                            const at::Tensor& running_var, double eps, double momentum, bool mask_form,
                            bool unbias) {
    return fused_forward(ctx, x, weight, bias, residual, running_mean, running_var, eps, momentum, true, mask_form,
                         unbias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return fused_backward(ctx, grads, true, true, 10);
  }
};

// relu(bn(x) [+ residual]), or bn(x) alone without relu. mask_form: with relu, the backward takes
// the ReLU's gradient from a bit mask (else from the saved output).
at::Tensor fused_call(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& residual, bool relu,
                      bool mask_form, bool unbias) {
  TORCH_CHECK(relu || !residual.defined(), "fused batch norm: the residual add comes with the ReLU");
  const double eps = bn.options.eps(), momentum = *bn.options.momentum();
  at::Tensor y;
  if (!relu)
    y = bn_function::apply(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, eps, momentum, unbias);
  else if (residual.defined())
    y = bn_add_relu_function::apply(x, bn.weight, bn.bias, residual, bn.running_mean, bn.running_var, eps, momentum,
                                    mask_form, unbias);
  else
    y = bn_relu_function::apply(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, eps, momentum, mask_form,
                                unbias);
  {
    at::NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1);
  }
  return y;
}

class cudnn_ops final : public batch_norm_ops {
 public:
  cudnn_ops(c10::Device device, at::ScalarType dtype, const cudnn_fusion_probe& probe)
      : device_(device), dtype_(dtype), probe_(probe) {}
  torch::Tensor bn_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    const cudnn_fusion_check& c = probe_.bn_relu;
    if (!c.works || !takes(bn, x) || !builds(bn, x, true, false, c)) return bn.forward(x).relu_();
    return relu_call(bn, x, at::Tensor(), c);
  }
  torch::Tensor bn_add_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& residual) override {
    const cudnn_fusion_check& c = probe_.bn_add_relu;
    if (!c.works || !takes(bn, x) || residual.sizes() != x.sizes() || residual.device() != x.device() ||
        !builds(bn, x, true, true, c))
      return bn.forward(x).add_(residual).relu_();
    return relu_call(bn, x, residual, c);
  }
  torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
    const cudnn_fusion_check& c = probe_.batch_norm;
    if (!c.works || !takes(bn, x) || !builds(bn, x, false, false, c)) return bn.forward(x);
    return fused_call(bn, x, at::Tensor(), false, false, c.unbias);
  }

 private:
  bool takes(const torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x) const {
    return fusable(bn) && x.dim() == 4 && x.device() == device_ && x.scalar_type() == dtype_ &&
           bn.weight.scalar_type() == at::kFloat && bn.running_mean.scalar_type() == at::kFloat &&
           bn.running_var.scalar_type() == at::kFloat && cudnn_batch_norm_fits(x.numel());
  }
  // The route and form the probe chose for this fusion: a graph (bit mask or saved output) or, in
  // fp16, cuDNN's Ex call.
  static at::Tensor relu_call(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& residual,
                              const cudnn_fusion_check& c) {
    if (c.ex_call) return cudnn_ex_batch_norm_relu(bn, x, residual, c.unbias);
    return fused_call(bn, x, residual, true, !c.relu_from_output, c.unbias);
  }
  static bool builds(const torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, bool relu, bool add,
                     const cudnn_fusion_check& c) {
    const c10::cuda::CUDAGuard guard(x.device());  // the handle and the capture check are the device's
    if (c.ex_call) return cudnn_ex_refusal(bn, x.sizes(), x.scalar_type(), add).empty();
    return graph_cache::instance()
        .refusal(key_of(x, relu, add, relu && !c.relu_from_output, bn.options.eps(), *bn.options.momentum()))
        .empty();
  }
  c10::Device device_;
  at::ScalarType dtype_;
  cudnn_fusion_probe probe_;
};

// The largest |a - b| over max|b|, as a short text when it exceeds atol + rtol * max|b|.
std::string differs(const char* what, const at::Tensor& a, const at::Tensor& b, double atol, double rtol) {
  const at::Tensor fa = a.detach().to(at::kCPU, at::kDouble), fb = b.detach().to(at::kCPU, at::kDouble);
  const double err = (fa - fb).abs().max().item<double>(), scale = fb.abs().max().item<double>();
  if (std::isfinite(err) && err <= atol + rtol * scale) return "";
  std::ostringstream os;
  os << what << " differs from the reference by " << err << " (max |reference| " << scale << ")";
  return os.str();
}

// A fused call under probe: relu(bn(x) [+ residual]) (bn(x) without relu), correcting the running
// variance where `unbias`.
using probed_call = std::function<at::Tensor(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x,
                                             const at::Tensor& residual, bool unbias)>;

// One fusion on a small problem, against the reference: "" when it matches. First which batch
// variance its running variance holds, from a forward call (`unbias` where it is the biased one),
// then the whole call with that correction: outputs, gradients and statistics within the dtype's
// tolerance, and the running variance as PyTorch's, tightly.
std::string probe_one(c10::Device device, at::ScalarType dtype, bool relu, bool add, const probed_call& call,
                      bool& unbias) {
  const at::AutoGradMode grad_mode(true);
  const c10::cuda::CUDAGuard guard(device);
  const batch_norm_problem p = make_batch_norm_problem({4, 64, 8, 8}, dtype, add, 1234, device);
  auto module = [&] {
    torch::nn::BatchNorm2d bn(64);
    bn->to(device);
    bn->train();
    at::NoGradGuard no_grad;
    bn->weight.copy_(p.weight);
    bn->bias.copy_(p.bias);
    return bn;
  };
  const double momentum = *module()->options.momentum();
  {
    torch::nn::BatchNorm2d bn = module();
    const at::Tensor before = bn->running_var.clone();
    const at::NoGradGuard no_grad;
    call(*bn, p.x, add ? p.residual : at::Tensor(), false);
    const running_var_kind kind = classify_running_var(bn->running_var, before, p.x, momentum);
    if (kind == running_var_kind::neither) return std::string("running_var holds ") + running_var_kind_name(kind);
    unbias = kind == running_var_kind::biased;
  }
  torch::nn::BatchNorm2d fused = module(), reference = module();
  const at::Tensor before = fused->running_var.clone();
  const at::Tensor xf = p.x.detach().requires_grad_(), xr = p.x.detach().requires_grad_();
  const at::Tensor rf = add ? p.residual.detach().requires_grad_() : at::Tensor();
  const at::Tensor rr = add ? p.residual.detach().requires_grad_() : at::Tensor();
  const at::Tensor yf = call(*fused, xf, rf, unbias);
  const at::Tensor yr = relu ? reference_batch_norm_relu(*reference, xr, rr) : reference_batch_norm(*reference, xr);
  yf.backward(p.dy);
  yr.backward(p.dy);
  const fused_tolerance t = fused_batch_norm_tolerance(dtype);
  std::vector<std::string> found = {
      differs("the output", yf, yr, t.atol, t.rtol),
      differs("dx", xf.grad(), xr.grad(), t.atol, t.rtol),
      differs("the weight's gradient", fused->weight.grad(), reference->weight.grad(), 0, t.stats_rtol),
      differs("the bias's gradient", fused->bias.grad(), reference->bias.grad(), 0, t.stats_rtol),
      differs("running_mean", fused->running_mean, reference->running_mean, 0, t.stats_rtol),
      differs("running_var", fused->running_var, reference->running_var, 0, t.stats_rtol)};
  if (add) found.push_back(differs("the residual's gradient", rf.grad(), rr.grad(), t.atol, t.rtol));
  const running_var_kind corrected = classify_running_var(fused->running_var, before, p.x, momentum);
  if (corrected != running_var_kind::unbiased)
    found.push_back(std::string("running_var") + (unbias ? ", corrected," : "") + " holds " +
                    running_var_kind_name(corrected));
  for (const auto& f : found)
    if (!f.empty()) return f;
  return "";
}

// "cuda" means the current device.
c10::Device indexed(c10::Device device) {
  return device.has_index() ? device : c10::Device(c10::kCUDA, c10::cuda::current_device());
}

}  // namespace

cudnn_fusion_probe probe_cudnn_batch_norm(c10::Device device, at::ScalarType dtype, fused_bn_route route) {
  cudnn_fusion_probe out;
  struct kind {
    cudnn_fusion_check* check;
    bool relu, add;
  };
  // "" where the graph form works, else why not.
  auto attempt = [&](bool relu, bool add, bool mask_form, bool& unbias) {
    try {
      device = indexed(device);
      fe_type(dtype);
      load_cudnn();
      if (fe::detail::get_backend_version() < 90000) throw std::runtime_error("needs cuDNN 9 or newer");
      const probed_call call = [relu, mask_form](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x,
                                                 const at::Tensor& r, bool u) {
        return fused_call(bn, x, r, relu, mask_form, u);
      };
      const std::string mismatch = probe_one(device, dtype, relu, add, call, unbias);
      return mismatch.empty() ? mismatch : "the cuDNN graph's " + mismatch + " on a 4x64x8x8 problem";
    } catch (const std::exception& e) {
      return first_line(e.what());
    }
  };
  // The same for cuDNN's batch-norm Ex call (with ReLU, fp16).
  auto attempt_ex = [&](bool add, bool& unbias) {
    try {
      device = indexed(device);
      const std::string unavailable = cudnn_ex_unavailable(dtype);
      if (!unavailable.empty()) return unavailable;
      const probed_call call = [](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& r, bool u) {
        return cudnn_ex_batch_norm_relu(bn, x, r, u);
      };
      const std::string mismatch = probe_one(device, dtype, true, add, call, unbias);
      return mismatch.empty() ? mismatch : "its " + mismatch + " on a 4x64x8x8 problem";
    } catch (const std::exception& e) {
      return first_line(e.what());
    }
  };
  for (const kind k : {kind{&out.bn_relu, true, false}, kind{&out.bn_add_relu, true, true},
                       kind{&out.batch_norm, false, false}}) {
    bool unbias = false;
    const bool graphs = route != fused_bn_route::ex || !k.relu;
    std::string why = graphs ? attempt(k.relu, k.add, true, unbias) : "the graphs were not asked for";
    // No batch-norm sample of NVIDIA's writes the bit mask (its layer-norm bit-mask sample builds the
    // same comparison); their batch-norm forward writes none, and the backward can take the ReLU's
    // gradient from its output instead.
    if (!why.empty() && k.relu && graphs) {
      const std::string other = attempt(k.relu, k.add, false, unbias);
      k.check->relu_from_output = other.empty();
      if (other.empty()) {
        k.check->mask_refusal = why;
        why.clear();
      } else {
        why = "with a bit mask: " + why + "; from the output: " + other;
      }
    }
    // Neither graph form: in fp16, the Ex call, the persistent NHWC kernels PyTorch's own fp16
    // batch norm runs, with the add and the ReLU.
    if (!why.empty() && k.relu && route != fused_bn_route::graph) {
      const std::string ex = attempt_ex(k.add, unbias);
      if (ex.empty()) {
        k.check->ex_call = true;
        k.check->graph_refusal = why;
        why.clear();
      } else {
        why = (graphs ? "cuDNN graph " + why + "; " : std::string()) + "cuDNN's Ex call: " + ex;
      }
    }
    k.check->works = why.empty();
    k.check->why = why;
    k.check->unbias = why.empty() && unbias;
  }
  return out;
}

std::shared_ptr<batch_norm_ops> cudnn_batch_norm_ops(c10::Device device, at::ScalarType dtype,
                                                     const cudnn_fusion_probe& probe) {
  return std::make_shared<cudnn_ops>(indexed(device), dtype, probe);
}

void prepare_cudnn_batch_norm() noexcept {
  try {
    load_cudnn();
  } catch (const std::exception&) {  // the probe meets it again and says why
  }
}

void forget_cudnn_batch_norm_batches(const std::vector<std::int64_t>& batches) {
  graph_cache::instance().forget(batches);
}

std::string cudnn_batch_norm_refusal(const torch::nn::BatchNorm2dImpl& bn, at::IntArrayRef nchw, at::ScalarType dtype,
                                     bool relu, bool add, bool relu_from_output) {
  TORCH_CHECK(nchw.size() == 4, "cudnn_batch_norm_refusal: expected N, C, H, W");
  TORCH_CHECK(relu || !add, "fused batch norm: the residual add comes with the ReLU");
  const c10::cuda::CUDAGuard guard(bn.weight.device());
  try {
    fe_type(dtype);
    load_cudnn();
  } catch (const std::runtime_error& e) {
    return first_line(e.what());
  }
  const graph_key k{at::native::getCudnnHandle(), dtype, relu, add, relu && !relu_from_output, nchw[0], nchw[1],
                    nchw[2], nchw[3], bn.options.eps(), *bn.options.momentum()};
  return graph_cache::instance().refusal(k);
}

std::string cudnn_batch_norm_refusal(const torch::nn::BatchNorm2dImpl& bn, at::IntArrayRef nchw, at::ScalarType dtype,
                                     bool relu, bool add, const cudnn_fusion_check& check) {
  if (relu && check.ex_call) return cudnn_ex_refusal(bn, nchw, dtype, add);
  return cudnn_batch_norm_refusal(bn, nchw, dtype, relu, add, check.relu_from_output);
}

std::string cudnn_batch_norm_graph_check(at::ScalarType dtype, bool relu, bool add, bool mask,
                                         at::IntArrayRef nchw) {
  TORCH_CHECK(nchw.size() == 4, "cudnn_batch_norm_graph_check: expected N, C, H, W");
  try {
    load_cudnn();
    const graph_key k{nullptr, dtype, relu, add, relu && mask, nchw[0], nchw[1], nchw[2], nchw[3], 1e-5, 0.1};
    make_forward(k);
    make_backward(backward_key(k));
    return std::string();
  } catch (const std::exception& e) {
    return first_line(e.what());
  }
}

torch::Tensor cudnn_batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                    const torch::Tensor& residual, bool unbias_running_var, bool relu_from_output) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4, "cudnn_batch_norm_relu: expected a CUDA N,C,H,W tensor");
  TORCH_CHECK(fusable(bn), "cudnn_batch_norm_relu: the batch norm is not fusable (training mode, momentum set)");
  return fused_call(bn, x, residual, true, !relu_from_output, unbias_running_var);
}

torch::Tensor cudnn_batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x, bool unbias_running_var) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4, "cudnn_batch_norm: expected a CUDA N,C,H,W tensor");
  TORCH_CHECK(fusable(bn), "cudnn_batch_norm: the batch norm is not fusable (training mode, momentum set)");
  return fused_call(bn, x, at::Tensor(), false, false, unbias_running_var);
}

}  // namespace trainbench

#else  // no cuDNN frontend headers at build time

namespace trainbench {

namespace {
const char* const missing =
    "the cuDNN frontend headers were not found when trainbench was built (scripts/setup.sh installs "
    "nvidia-cudnn-frontend)";
}

cudnn_fusion_probe probe_cudnn_batch_norm(c10::Device, at::ScalarType, fused_bn_route) {
  cudnn_fusion_probe p;
  for (cudnn_fusion_check* c : {&p.bn_relu, &p.bn_add_relu, &p.batch_norm}) c->why = missing;
  return p;
}
std::shared_ptr<batch_norm_ops> cudnn_batch_norm_ops(c10::Device, at::ScalarType, const cudnn_fusion_probe&) {
  throw std::runtime_error(missing);
}
void prepare_cudnn_batch_norm() noexcept {}
void forget_cudnn_batch_norm_batches(const std::vector<std::int64_t>&) {}
std::string cudnn_batch_norm_refusal(const torch::nn::BatchNorm2dImpl&, at::IntArrayRef, at::ScalarType, bool, bool,
                                     bool) {
  return missing;
}
std::string cudnn_batch_norm_refusal(const torch::nn::BatchNorm2dImpl&, at::IntArrayRef, at::ScalarType, bool, bool,
                                     const cudnn_fusion_check&) {
  return missing;
}
std::string cudnn_batch_norm_graph_check(at::ScalarType, bool, bool, bool, at::IntArrayRef) { return missing; }
torch::Tensor cudnn_batch_norm_relu(torch::nn::BatchNorm2dImpl&, const torch::Tensor&, const torch::Tensor&, bool,
                                    bool) {
  throw std::runtime_error(missing);
}
torch::Tensor cudnn_batch_norm(torch::nn::BatchNorm2dImpl&, const torch::Tensor&, bool) {
  throw std::runtime_error(missing);
}

}  // namespace trainbench

#endif
