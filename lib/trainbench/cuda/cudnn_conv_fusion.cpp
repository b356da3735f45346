#include "trainbench/cuda/cudnn_conv_fusion.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/nn/modules/batchnorm.h>

#include <functional>
#include <sstream>
#include <stdexcept>

#if TRAINBENCH_HAVE_CUDNN_FRONTEND
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>

#include <unordered_map>

#include "trainbench/cuda/cudnn_graph.hpp"
#include "trainbench/cuda/dbn_apply.hpp"
#endif

namespace trainbench {

#if TRAINBENCH_HAVE_CUDNN_FRONTEND

namespace {
using namespace cudnn_graph;

attr nhwc_tensor(fe::graph::Graph& g, const char* name, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_dim({n, c, h, w}).set_stride({c * h * w, 1, w * c, c}));
}

attr channel_tensor(fe::graph::Graph& g, const char* name, std::int64_t c, fe::DataType_t type) {
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}).set_data_type(type));
}

void as_channel_output(const attr& t, std::int64_t c) {
  t->set_output(true).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}).set_data_type(fe::DataType_t::FLOAT);
}

void start(fe::graph::Graph& g, fe::DataType_t io) {
  g.set_io_data_type(io).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
}

// relu(x * scale + bias): the prologue both the forward and the weight gradient apply.
attr scale_bias_relu(fe::graph::Graph& g, const attr& x, const attr& scale, const attr& bias) {
  using fe::graph::Pointwise_attributes;
  const attr scaled = g.pointwise(x, scale, Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
  const attr shifted = g.pointwise(scaled, bias, Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  return g.pointwise(shifted, Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
}

template <class Attributes>
Attributes geometry(Attributes a, const conv_geometry& geo) {
  return a.set_padding({geo.padding, geo.padding}).set_stride({geo.stride, geo.stride}).set_dilation({1, 1});
}

at::Tensor channels(const at::Tensor& like, std::int64_t c) { return at::empty({c}, like.options().dtype(at::kFloat)); }

dbn_apply_type apply_type(at::ScalarType t) {
  switch (t) {
    case at::kHalf:
      return dbn_apply_type::f16;
    case at::kBFloat16:
      return dbn_apply_type::bf16;
    default:
      return dbn_apply_type::f32;
  }
}

}  // namespace

// A graph, its plan's workspace, and whether its plans wait to be timed on the first call.
struct built {
  fe::graph::Graph graph;
  std::int64_t workspace = 0;
  bool tune = false;
  // The first call times every plan (autotune), later calls run the fastest. Autotune runs the
  // graph many times on this pack: `reset` zeroes the outputs that must start at zero again before
  // the call's own run.
  void execute(cudnnHandle_t handle, std::unordered_map<attr, void*>& pack, const at::Tensor& like,
               const std::function<void()>& reset = {}) {
    if (tune) {
      workspace = autotune(graph, handle, pack, like);
      tune = false;
      if (reset) reset();
    }
    run(graph, handle, workspace, pack, like);
  }
};

// How the prologued graphs are typed: float intermediates and a float scale and bias first (what
// the finalize hands over), then the scale and bias in the I/O type, then the intermediates too
// (NVIDIA's samples and tests of these patterns pass both in the I/O type).
struct prologue_types {
  fe::DataType_t intermediate, scale;
  const char* name;
};

struct cudnn_conv_fusion::graphs {
  conv_fusion_shape s;
  cudnnHandle_t handle = nullptr;
  bool all_plans = false;
  bool validate_only = false;  // the frontend's own checks, no cuDNN handle: check_graphs
  fe::DataType_t io = fe::DataType_t::HALF;
  // Which typing the forward and the weight gradient took (each its own first that builds).
  const char* fwd_types = "";
  const char* wgrad_types = "";
  bool fwd_io_scale = false, wgrad_io_scale = false;

  built fin, fwd, dgrad, wgrad;
  attr fin_sum, fin_sq, fin_gamma, fin_beta, fin_prev_mean, fin_prev_var, fin_eq_scale, fin_eq_bias, fin_mean,
      fin_inv_std, fin_next_mean, fin_next_var;
  attr fwd_x, fwd_w, fwd_scale, fwd_bias, fwd_y, fwd_sum, fwd_sq;
  attr dg_dy, dg_w, dg_x, dg_mean, dg_inv_std, dg_gamma, dg_beta, dg_dz, dg_dgamma, dg_dbeta, dg_eq_dy, dg_eq_x,
      dg_eq_b;
  attr wg_x, wg_scale, wg_bias, wg_dy, wg_dw;

  void finish(built& b) {
    if (validate_only) return check(b.graph.validate(), "validate");
    build(b.graph, handle, all_plans);
    check(b.graph.get_workspace_size(b.workspace), "get_workspace_size");
    b.tune = all_plans;
  }

  // bn_finalize needs the previous running statistics and the momentum: the frontend's node
  // reads both next statistics' dimensions unconditionally.
  void build_finalize() {
    fe::graph::Graph& g = fin.graph;
    start(g, fe::DataType_t::FLOAT);
    const std::int64_t c = s.c;
    fin_sum = channel_tensor(g, "sum", c, fe::DataType_t::FLOAT);
    fin_sq = channel_tensor(g, "sq_sum", c, fe::DataType_t::FLOAT);
    fin_gamma = channel_tensor(g, "gamma", c, fe::DataType_t::FLOAT);
    fin_beta = channel_tensor(g, "beta", c, fe::DataType_t::FLOAT);
    fin_prev_mean = channel_tensor(g, "running_mean", c, fe::DataType_t::FLOAT);
    fin_prev_var = channel_tensor(g, "running_var", c, fe::DataType_t::FLOAT);
    const attr epsilon = g.tensor(static_cast<float>(s.eps));
    attr momentum = g.tensor(static_cast<float>(s.momentum));
    const attr count = g.tensor(static_cast<std::int64_t>(s.n * s.h * s.w));
    auto outs = g.bn_finalize(fin_sum, fin_sq, fin_gamma, fin_beta, epsilon, count,
                              fe::graph::BN_finalize_attributes().set_previous_running_stats(fin_prev_mean,
                                                                                             fin_prev_var, momentum));
    fin_eq_scale = outs[0];
    fin_eq_bias = outs[1];
    fin_mean = outs[2];
    fin_inv_std = outs[3];
    fin_next_mean = outs[4];
    fin_next_var = outs[5];
    for (const attr& t : {fin_eq_scale, fin_eq_bias, fin_mean, fin_inv_std, fin_next_mean, fin_next_var})
      as_channel_output(t, c);
    finish(fin);
  }

  void build_forward(const prologue_types& t) {
    fwd = built();
    fe::graph::Graph& g = fwd.graph;
    g.set_io_data_type(io).set_intermediate_data_type(t.intermediate).set_compute_data_type(fe::DataType_t::FLOAT);
    fwd_x = nhwc_tensor(g, "x", s.n, s.c, s.h, s.w);
    fwd_w = nhwc_tensor(g, "w", s.k, s.c, s.r, s.r);
    fwd_scale = channel_tensor(g, "eq_scale", s.c, t.scale);
    fwd_bias = channel_tensor(g, "eq_bias", s.c, t.scale);
    const attr a = scale_bias_relu(g, fwd_x, fwd_scale, fwd_bias);
    fwd_y = g.conv_fprop(a, fwd_w, geometry(fe::graph::Conv_fprop_attributes(), s.g));
    const std::int64_t p = s.out_h(), q = s.out_w();
    fwd_y->set_output(true).set_dim({s.n, s.k, p, q}).set_stride({s.k * p * q, 1, q * s.k, s.k});
    auto stats = g.genstats(fwd_y, fe::graph::Genstats_attributes());
    fwd_sum = stats[0];
    fwd_sq = stats[1];
    as_channel_output(fwd_sum, s.k);
    as_channel_output(fwd_sq, s.k);
    finish(fwd);
  }

  void build_dgrad() {
    using fe::graph::Pointwise_attributes;
    fe::graph::Graph& g = dgrad.graph;
    start(g, io);
    const std::int64_t p = s.out_h(), q = s.out_w();
    dg_dy = nhwc_tensor(g, "dy", s.n, s.k, p, q);
    dg_w = nhwc_tensor(g, "w", s.k, s.c, s.r, s.r);
    const attr da = g.conv_dgrad(dg_dy, dg_w, geometry(fe::graph::Conv_dgrad_attributes(), s.g));
    da->set_dim({s.n, s.c, s.h, s.w}).set_stride({s.c * s.h * s.w, 1, s.w * s.c, s.c});
    dg_x = nhwc_tensor(g, "x", s.n, s.c, s.h, s.w);
    dg_mean = channel_tensor(g, "mean", s.c, fe::DataType_t::FLOAT);
    dg_inv_std = channel_tensor(g, "inv_std", s.c, fe::DataType_t::FLOAT);
    dg_gamma = channel_tensor(g, "gamma", s.c, fe::DataType_t::FLOAT);
    dg_beta = channel_tensor(g, "beta", s.c, fe::DataType_t::FLOAT);
    // The batch norm's output before the ReLU, recomputed: where it is positive the gradient passes.
    const attr centred = g.pointwise(dg_x, dg_mean, Pointwise_attributes().set_mode(fe::PointwiseMode_t::SUB));
    const attr xhat = g.pointwise(centred, dg_inv_std, Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
    const attr scaled = g.pointwise(xhat, dg_gamma, Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
    const attr pre = g.pointwise(scaled, dg_beta, Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
    dg_dz = g.pointwise(da, pre, Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_BWD));  // (dy, x)
    dg_dz->set_output(true).set_data_type(io);
    auto w = g.dbn_weight(dg_dz, dg_x, dg_mean, dg_inv_std, dg_gamma, fe::graph::DBN_weight_attributes());
    dg_dgamma = w[0];
    dg_dbeta = w[1];
    dg_eq_dy = w[2];
    dg_eq_x = w[3];
    dg_eq_b = w[4];
    for (const attr& t : {dg_dgamma, dg_dbeta, dg_eq_dy, dg_eq_x, dg_eq_b}) as_channel_output(t, s.c);
    finish(dgrad);
  }

  void build_wgrad(const prologue_types& t) {
    wgrad = built();
    fe::graph::Graph& g = wgrad.graph;
    g.set_io_data_type(io).set_intermediate_data_type(t.intermediate).set_compute_data_type(fe::DataType_t::FLOAT);
    const std::int64_t p = s.out_h(), q = s.out_w();
    wg_x = nhwc_tensor(g, "x", s.n, s.c, s.h, s.w);
    wg_scale = channel_tensor(g, "eq_scale", s.c, t.scale);
    wg_bias = channel_tensor(g, "eq_bias", s.c, t.scale);
    const attr a = scale_bias_relu(g, wg_x, wg_scale, wg_bias);
    wg_dy = nhwc_tensor(g, "dy", s.n, s.k, p, q);
    wg_dw = g.conv_wgrad(wg_dy, a, geometry(fe::graph::Conv_wgrad_attributes(), s.g));
    wg_dw->set_output(true).set_dim({s.k, s.c, s.r, s.r}).set_stride({s.c * s.r * s.r, 1, s.r * s.c, s.c});
    finish(wgrad);
  }

  // The first typing cuDNN builds (prologue_types). Any error moves on to the next typing; where
  // none builds, the first failure that is not a refusal is thrown, else the refusals, each named.
  template <class Build>
  const prologue_types& first_typing(Build build_with) {
    static const prologue_types typings[] = {{fe::DataType_t::FLOAT, fe::DataType_t::FLOAT, "float scale and bias"},
                                             {fe::DataType_t::FLOAT, fe::DataType_t::NOT_SET, "scale and bias in the activation dtype"},
                                             {fe::DataType_t::NOT_SET, fe::DataType_t::NOT_SET, "scale, bias and intermediates in the activation dtype"}};
    std::string refusals, failure;
    bool named = true;
    for (const prologue_types& t : typings) {
      const prologue_types typed{t.intermediate == fe::DataType_t::NOT_SET ? io : t.intermediate,
                                 t.scale == fe::DataType_t::NOT_SET ? io : t.scale, t.name};
      if (io == fe::DataType_t::FLOAT && &t != &typings[0]) break;  // the same graph again
      try {
        build_with(typed);
        return t;
      } catch (const cudnn_refused& e) {
        refusals += std::string(refusals.empty() ? "" : "; ") + t.name + ": " + first_line(e.what());
        named = named && e.named_status;
      } catch (const std::exception& e) {
        if (failure.empty()) failure = std::string(t.name) + ": " + first_line(e.what());
      }
    }
    if (!failure.empty()) throw std::runtime_error(failure);
    throw cudnn_refused(refusals, named);
  }

  // The prologues' scale and bias in the type their graph was built for.
  at::Tensor operand(const at::Tensor& t, bool io_scale) const { return io_scale ? t.to(s.dtype) : t; }
};

namespace {
// Which graph a failure came from, in its first line.
template <class F>
void stage(const char* what, F build_it) {
  try {
    build_it();
  } catch (const cudnn_refused& e) {
    throw conv_fusion_refused(std::string(what) + ": " + first_line(e.what()));
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(what) + ": " + first_line(e.what()));
  }
}

void require(const at::Tensor& t, const char* name, at::IntArrayRef sizes, at::ScalarType dtype, bool nhwc) {
  TORCH_CHECK(t.is_cuda() && t.sizes() == sizes && t.scalar_type() == dtype &&
                  t.is_contiguous(nhwc ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous),
              "cudnn_conv_fusion: ", name, " must be a CUDA ", c10::toString(dtype), " tensor of ", sizes,
              nhwc ? ", channels_last" : ", contiguous", "; got ", t.sizes(), " ", t.scalar_type());
}
}  // namespace

cudnn_conv_fusion::cudnn_conv_fusion(const conv_fusion_shape& s, bool autotune)
    : s_(s), autotune_(autotune), g_(std::make_unique<graphs>()) {
  build_graphs(*g_, false);
}

std::string cudnn_conv_fusion::check_graphs(const conv_fusion_shape& s) {
  try {
    cudnn_conv_fusion f;
    f.s_ = s;
    f.g_ = std::make_unique<graphs>();
    f.build_graphs(*f.g_, true);
    return std::string();
  } catch (const std::exception& e) {
    return e.what();
  }
}

cudnn_conv_fusion::graphs& cudnn_conv_fusion::current() {
  const cudnnHandle_t handle = at::native::getCudnnHandle();
  if (handle == g_->handle) return *g_;
  const std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<graphs>& slot = others_[handle];
  if (!slot) {
    TORCH_CHECK(c10::cuda::currentStreamCaptureStatusMayInitCtx() == c10::cuda::CaptureStatus::None,
                "cudnn_conv_fusion: a thread's first call came during a CUDA graph capture; building its cuDNN "
                "plans there would break the capture: run one step eagerly first");
    auto built_here = std::make_unique<graphs>();
    build_graphs(*built_here, false);
    slot = std::move(built_here);
  }
  return *slot;
}

void cudnn_conv_fusion::build_graphs(graphs& g, bool validate_only) {
  g.s = s_;
  g.all_plans = autotune_;
  g.validate_only = validate_only;
  try {
    load_cudnn();
    g.io = fe_type(s_.dtype);
  } catch (const std::runtime_error& e) {
    throw conv_fusion_refused(e.what());  // no cuDNN to build with, or a dtype it has no fusion for
  }
  if (!validate_only) g.handle = at::native::getCudnnHandle();
  stage("batch norm finalize", [&] { g.build_finalize(); });
  stage("scale-bias-ReLU convolution with genstats", [&] {
    const prologue_types& t = g.first_typing([&](const prologue_types& typed) { g.build_forward(typed); });
    g.fwd_types = t.name;
    g.fwd_io_scale = t.scale == fe::DataType_t::NOT_SET;
  });
  stage("data gradient with dReLU and the batch norm's weight gradients", [&] { g.build_dgrad(); });
  stage("scale-bias-ReLU weight gradient", [&] {
    const prologue_types& t = g.first_typing([&](const prologue_types& typed) { g.build_wgrad(typed); });
    g.wgrad_types = t.name;
    g.wgrad_io_scale = t.scale == fe::DataType_t::NOT_SET;
  });
}

cudnn_conv_fusion::~cudnn_conv_fusion() = default;

bn_finalized cudnn_conv_fusion::finalize(const at::Tensor& sum, const at::Tensor& sq_sum, const at::Tensor& gamma,
                                         const at::Tensor& beta, const at::Tensor& running_mean,
                                         const at::Tensor& running_var) {
  // The next running statistics are written beside the buffers, then copied over them: the graph
  // never reads and writes one buffer.
  const at::Tensor next_mean = channels(sum, s_.c), next_var = channels(sum, s_.c);
  const bn_finalized f = finalize_to(sum, sq_sum, gamma, beta, running_mean, running_var, next_mean, next_var);
  running_mean.copy_(next_mean);
  running_var.copy_(next_var);
  return f;
}

bn_finalized cudnn_conv_fusion::finalize_to(const at::Tensor& sum, const at::Tensor& sq_sum, const at::Tensor& gamma,
                                            const at::Tensor& beta, const at::Tensor& prev_mean,
                                            const at::Tensor& prev_var, const at::Tensor& next_mean,
                                            const at::Tensor& next_var) {
  graphs& g = current();
  const std::int64_t c = g.s.c;
  for (const auto& [t, name] :
       {std::pair{&sum, "sum"}, std::pair{&sq_sum, "sq_sum"}, std::pair{&gamma, "gamma"}, std::pair{&beta, "beta"},
        std::pair{&prev_mean, "prev_mean"}, std::pair{&prev_var, "prev_var"}, std::pair{&next_mean, "next_mean"},
        std::pair{&next_var, "next_var"}})
    require(*t, name, {c}, at::kFloat, false);
  bn_finalized f{channels(sum, c), channels(sum, c), channels(sum, c), channels(sum, c)};
  std::unordered_map<attr, void*> pack{
      {g.fin_sum, sum.data_ptr()},             {g.fin_sq, sq_sum.data_ptr()},
      {g.fin_gamma, gamma.data_ptr()},         {g.fin_beta, beta.data_ptr()},
      {g.fin_prev_mean, prev_mean.data_ptr()}, {g.fin_prev_var, prev_var.data_ptr()},
      {g.fin_eq_scale, f.eq_scale.data_ptr()}, {g.fin_eq_bias, f.eq_bias.data_ptr()},
      {g.fin_mean, f.mean.data_ptr()},         {g.fin_inv_std, f.inv_std.data_ptr()},
      {g.fin_next_mean, next_mean.data_ptr()}, {g.fin_next_var, next_var.data_ptr()}};
  g.fin.execute(g.handle, pack, sum);
  return f;
}

conv_genstats cudnn_conv_fusion::forward(const at::Tensor& x, const bn_finalized& f, const at::Tensor& w) {
  graphs& g = current();
  const conv_fusion_shape& s = g.s;
  require(x, "x", {s.n, s.c, s.h, s.w}, s.dtype, true);
  require(w, "w", {s.k, s.c, s.r, s.r}, s.dtype, true);
  // Zeroed: NVIDIA's test of this pattern zeroes the statistics' outputs before it runs the graph.
  conv_genstats out{at::empty({s.n, s.k, s.out_h(), s.out_w()}, x.options().memory_format(at::MemoryFormat::ChannelsLast)),
                    at::zeros({s.k}, x.options().dtype(at::kFloat)), at::zeros({s.k}, x.options().dtype(at::kFloat))};
  const at::Tensor scale = g.operand(f.eq_scale, g.fwd_io_scale), bias = g.operand(f.eq_bias, g.fwd_io_scale);
  std::unordered_map<attr, void*> pack{{g.fwd_x, x.data_ptr()},         {g.fwd_w, w.data_ptr()},
                                       {g.fwd_scale, scale.data_ptr()}, {g.fwd_bias, bias.data_ptr()},
                                       {g.fwd_y, out.y.data_ptr()},     {g.fwd_sum, out.sum.data_ptr()},
                                       {g.fwd_sq, out.sq_sum.data_ptr()}};
  g.fwd.execute(g.handle, pack, x, [&] {
    out.sum.zero_();
    out.sq_sum.zero_();
  });
  return out;
}

cudnn_conv_fusion::gradients cudnn_conv_fusion::backward(const at::Tensor& dy, const at::Tensor& w,
                                                         const at::Tensor& x, const bn_finalized& f,
                                                         const at::Tensor& gamma, const at::Tensor& beta) {
  graphs& g = current();
  const conv_fusion_shape& s = g.s;
  require(dy, "dy", {s.n, s.k, s.out_h(), s.out_w()}, s.dtype, true);
  require(w, "w", {s.k, s.c, s.r, s.r}, s.dtype, true);
  require(x, "x", {s.n, s.c, s.h, s.w}, s.dtype, true);
  require(gamma, "gamma", {s.c}, at::kFloat, false);
  require(beta, "beta", {s.c}, at::kFloat, false);
  gradients out;
  const at::Tensor dz = at::empty_like(x, x.options().memory_format(at::MemoryFormat::ChannelsLast));
  // Reductions, zeroed as genstats' are (whether cuDNN adds into them is not documented).
  out.dgamma = at::zeros({s.c}, x.options().dtype(at::kFloat));
  out.dbeta = at::zeros({s.c}, x.options().dtype(at::kFloat));
  const at::Tensor eq_dy = channels(x, s.c), eq_x = channels(x, s.c), eq_b = channels(x, s.c);
  std::unordered_map<attr, void*> dpack{
      {g.dg_dy, dy.data_ptr()},        {g.dg_w, w.data_ptr()},          {g.dg_x, x.data_ptr()},
      {g.dg_mean, f.mean.data_ptr()},  {g.dg_inv_std, f.inv_std.data_ptr()}, {g.dg_gamma, gamma.data_ptr()},
      {g.dg_beta, beta.data_ptr()},    {g.dg_dz, dz.data_ptr()},        {g.dg_dgamma, out.dgamma.data_ptr()},
      {g.dg_dbeta, out.dbeta.data_ptr()}, {g.dg_eq_dy, eq_dy.data_ptr()}, {g.dg_eq_x, eq_x.data_ptr()},
      {g.dg_eq_b, eq_b.data_ptr()}};
  g.dgrad.execute(g.handle, dpack, x, [&] {
    out.dgamma.zero_();
    out.dbeta.zero_();
  });

  out.dw = at::empty({s.k, s.c, s.r, s.r}, w.options().memory_format(at::MemoryFormat::ChannelsLast));
  const at::Tensor scale = g.operand(f.eq_scale, g.wgrad_io_scale), bias = g.operand(f.eq_bias, g.wgrad_io_scale);
  std::unordered_map<attr, void*> wpack{{g.wg_x, x.data_ptr()},         {g.wg_scale, scale.data_ptr()},
                                        {g.wg_bias, bias.data_ptr()},   {g.wg_dy, dy.data_ptr()},
                                        {g.wg_dw, out.dw.data_ptr()}};
  g.wgrad.execute(g.handle, wpack, x);

  out.dx = at::empty_like(dz);
  launch_dbn_apply(apply_type(s.dtype), dz.data_ptr(), x.data_ptr(), eq_dy.data_ptr<float>(), eq_x.data_ptr<float>(),
                   eq_b.data_ptr<float>(), out.dx.data_ptr(), x.numel(), s.c, at::cuda::getCurrentCUDAStream().stream());
  return out;
}

std::string cudnn_conv_fusion::describe() const {
  return std::string("forward: ") + g_->fwd_types + "; weight gradient: " + g_->wgrad_types +
         (g_->all_plans ? "; every graph's plans timed on the first call" : "; cuDNN's first heuristic plans");
}

#else  // no cuDNN frontend headers at build time

struct cudnn_conv_fusion::graphs {};

cudnn_conv_fusion::cudnn_conv_fusion(const conv_fusion_shape&, bool) {
  throw conv_fusion_refused(
      "the cuDNN frontend headers were not found when trainbench was built (scripts/setup.sh installs "
      "nvidia-cudnn-frontend)");
}
cudnn_conv_fusion::~cudnn_conv_fusion() = default;
std::string cudnn_conv_fusion::check_graphs(const conv_fusion_shape&) {
  return "the cuDNN frontend headers were not found when trainbench was built";
}
void cudnn_conv_fusion::build_graphs(graphs&, bool) {}
cudnn_conv_fusion::graphs& cudnn_conv_fusion::current() { return *g_; }
bn_finalized cudnn_conv_fusion::finalize_to(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                            const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  return {};
}
bn_finalized cudnn_conv_fusion::finalize(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         const at::Tensor&, const at::Tensor&) {
  return {};
}
conv_genstats cudnn_conv_fusion::forward(const at::Tensor&, const bn_finalized&, const at::Tensor&) { return {}; }
cudnn_conv_fusion::gradients cudnn_conv_fusion::backward(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                         const bn_finalized&, const at::Tensor&, const at::Tensor&) {
  return {};
}
std::string cudnn_conv_fusion::describe() const { return std::string(); }

#endif

namespace {

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor w = want.to(at::kDouble);
  const double norm = w.norm().item<double>();
  return (got.to(at::kDouble) - w).norm().item<double>() / (norm > 0 ? norm : 1.0);
}

// ms per call of `calls` calls of f between two events on the current stream.
double time_calls(const std::function<void()>& f, int calls) {
  at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
  start.record();
  for (int i = 0; i < calls; ++i) f();
  end.record();
  end.synchronize();
  return static_cast<double>(start.elapsed_time(end)) / calls;
}

struct problem {
  at::Tensor x, w, dy, gamma, beta, sum, sq_sum, running_mean, running_var;
};

problem make_problem(const conv_fusion_shape& s, const at::Tensor& weight) {
  const auto act = weight.options().dtype(s.dtype);
  const auto f32 = weight.options().dtype(at::kFloat);
  // A generator of its own: a run that checks its fusions draws the same batches as one that does not.
  at::Generator gen = at::cuda::detail::createCUDAGenerator(weight.device().index());
  gen.set_current_seed(20261207);
  problem p;
  p.x = at::randn({s.n, s.c, s.h, s.w}, gen, act).contiguous(at::MemoryFormat::ChannelsLast);
  p.w = weight.detach().to(s.dtype).contiguous(at::MemoryFormat::ChannelsLast);
  p.dy = at::randn({s.n, s.k, s.out_h(), s.out_w()}, gen, act).contiguous(at::MemoryFormat::ChannelsLast);
  p.gamma = at::randn({s.c}, gen, f32) * 0.1 + 1.0;
  p.beta = at::randn({s.c}, gen, f32) * 0.1;
  const at::Tensor x32 = p.x.to(at::kFloat);
  p.sum = x32.sum({0, 2, 3});
  p.sq_sum = (x32 * x32).sum({0, 2, 3});
  p.running_mean = at::zeros({s.c}, f32);
  p.running_var = at::ones({s.c}, f32);
  return p;
}

// What differs between the fused results and the reference, "" where nothing does.
std::string compare(cudnn_conv_fusion& fused, const problem& p, const conv_fusion_shape& s, double& worst) {
  const bn_finalized f = fused.finalize(p.sum, p.sq_sum, p.gamma, p.beta, p.running_mean.clone(), p.running_var.clone());
  const conv_genstats y = fused.forward(p.x, f, p.w);
  const cudnn_conv_fusion::gradients g = fused.backward(p.dy, p.w, p.x, f, p.gamma, p.beta);

  const bn_finalized rf = bn_finalize_reference(p.sum, p.sq_sum, s.n * s.h * s.w, p.gamma, p.beta, s.eps);
  const conv_genstats ry = sbr_conv_genstats_reference(p.x, rf.eq_scale, rf.eq_bias, p.w, s.g);
  const dgrad_dbn rd = dgrad_drelu_dbn_weight_reference(p.dy, p.w, p.x, rf.mean, rf.inv_std, p.gamma, p.beta, s.g);
  const at::Tensor rdw = sbr_wgrad_reference(p.x, rf.eq_scale, rf.eq_bias, p.dy, p.w, s.g);
  const at::Tensor rdx = dbn_apply_reference(rd.dz, p.x, rd.eq_dy, rd.eq_x, rd.eq_b);

  const double tol = conv_fusion_tolerance(s.dtype);
  std::ostringstream wrong;
  const std::pair<const char*, std::pair<at::Tensor, at::Tensor>> outputs[] = {
      {"eq_scale", {f.eq_scale, rf.eq_scale}}, {"eq_bias", {f.eq_bias, rf.eq_bias}}, {"y", {y.y, ry.y}},
      {"sum", {y.sum, ry.sum}},                {"sq_sum", {y.sq_sum, ry.sq_sum}},  {"dx", {g.dx, rdx}},
      {"dw", {g.dw, rdw}},                     {"dgamma", {g.dgamma, rd.dgamma}},  {"dbeta", {g.dbeta, rd.dbeta}}};
  for (const auto& [name, pair] : outputs) {
    const double e = relative_error(pair.first, pair.second);
    worst = std::max(worst, e);
    if (!(e <= tol)) wrong << (wrong.tellp() > 0 ? ", " : "") << name << " off by " << e << " (tolerance " << tol << ")";
  }
  return wrong.str();
}

// cudnn_conv_fusion behind the training op's interface.
class cudnn_kernels final : public conv_fusion_kernels {
 public:
  cudnn_kernels(std::unique_ptr<cudnn_conv_fusion> fused, const conv_fusion_shape& s, const at::Tensor& like)
      : fused_(std::move(fused)), s_(s) {
    const auto f32 = like.options().dtype(at::kFloat);
    for (at::Tensor* t : {&prev_mean_, &next_mean_}) *t = at::zeros({s.c}, f32);
    for (at::Tensor* t : {&prev_var_, &next_var_}) *t = at::ones({s.c}, f32);
    count_ = at::full({1}, static_cast<double>(s.n * s.h * s.w), f32);
  }
  bn_finalized finalize(const at::Tensor& sum, const at::Tensor& sq_sum, std::int64_t count, const at::Tensor& gamma,
                        const at::Tensor& beta, double eps) override {
    TORCH_CHECK(count == s_.n * s_.h * s_.w && eps == s_.eps, "cudnn_conv_fusion: finalize built for ",
                s_.n * s_.h * s_.w, " values and eps ", s_.eps, ", called with ", count, " and ", eps);
    return fused_->finalize_to(sum, sq_sum, gamma, beta, prev_mean_, prev_var_, next_mean_, next_var_);
  }
  // PyTorch's SyncBatchNorm update for one rank: one kernel, the same convention (the unbiased
  // variance from inv_std, the module's momentum), in place of the reference's few.
  void update_running(torch::nn::BatchNorm2dImpl& bn, const bn_finalized& f, std::int64_t count) override {
    TORCH_CHECK(count == s_.n * s_.h * s_.w, "cudnn_conv_fusion: built for ", s_.n * s_.h * s_.w,
                " values per channel, called with ", count);
    at::batch_norm_gather_stats_with_counts(f.mean, f.mean.unsqueeze(0), f.inv_std.unsqueeze(0), bn.running_mean,
                                            bn.running_var, *bn.options.momentum(), bn.options.eps(), count_);
    bn.num_batches_tracked.add_(1);
  }
  // One Welford pass (PyTorch's, NHWC-aware) where no genstats epilogue made the sums.
  bn_finalized statistics(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta, double eps) override {
    auto [mean, inv_std] = at::batch_norm_stats(x, eps);
    const at::Tensor eq_scale = gamma.to(at::kFloat) * inv_std;
    return {mean, inv_std, eq_scale, beta.to(at::kFloat) - mean * eq_scale};
  }
  conv_genstats forward(const at::Tensor& x, const bn_finalized& f, const at::Tensor& w, conv_geometry g) override {
    same_geometry(g);
    return fused_->forward(x, f, w);
  }
  conv_fusion_gradients backward(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x, const bn_finalized& f,
                                 const at::Tensor& gamma, const at::Tensor& beta, conv_geometry g) override {
    same_geometry(g);
    return fused_->backward(dy, w, x, f, gamma, beta);
  }

 private:
  void same_geometry(conv_geometry g) const {
    TORCH_CHECK(g.stride == s_.g.stride && g.padding == s_.g.padding, "cudnn_conv_fusion: built for stride ",
                s_.g.stride, " padding ", s_.g.padding, ", called with ", g.stride, " and ", g.padding);
  }
  std::unique_ptr<cudnn_conv_fusion> fused_;
  conv_fusion_shape s_;
  // finalize's previous and next running statistics: cuDNN's, never read (the model's are
  // update_running's).
  at::Tensor prev_mean_, prev_var_, next_mean_, next_var_;
  at::Tensor count_;  // N*H*W, float, for update_running
};

}  // namespace

conv_fusion_build build_cudnn_conv_fusion(const conv_fusion_shape& s, const at::Tensor& weight) {
  TORCH_CHECK(weight.is_cuda(), "build_cudnn_conv_fusion: the weight must be on a CUDA device");
  const c10::cuda::CUDAGuard guard(weight.device());
  conv_fusion_build out;
  std::unique_ptr<cudnn_conv_fusion> fused;
  try {
    fused = std::make_unique<cudnn_conv_fusion>(s, /*autotune=*/false);
  } catch (const conv_fusion_refused& e) {
    out.refused = e.what();
    return out;
  }
  double worst = 0.0;
  out.wrong = compare(*fused, make_problem(s, weight), s, worst);
  if (out.wrong.empty()) out.kernels = std::make_shared<cudnn_kernels>(std::move(fused), s, weight);
  return out;
}

conv_fusion_timing time_conv_fusion(const conv_fusion_shape& s, const at::Tensor& weight, batch_norm_ops& unfused,
                                    int rounds, int calls, bool autotune) {
  TORCH_CHECK(weight.is_cuda(), "time_conv_fusion: the weight must be on a CUDA device");
  const c10::cuda::CUDAGuard guard(weight.device());
  conv_fusion_timing out;
  const problem p = make_problem(s, weight);

  std::unique_ptr<cudnn_conv_fusion> fused;
  try {
    fused = std::make_unique<cudnn_conv_fusion>(s, autotune);
  } catch (const conv_fusion_refused& e) {
    out.refused = e.what();
    return out;
  }
  out.how = fused->describe();
  // The first calls: with autotune, each graph's plans are timed here.
  out.wrong = compare(*fused, p, s, out.max_relative_error);

  // The unfused side as a training step has it: a batch norm module of its own (fp32 parameters,
  // training mode), the convolution's weight a leaf, gradients written fresh on every call.
  torch::nn::BatchNorm2d bn(torch::nn::BatchNorm2dOptions(s.c).eps(s.eps).momentum(s.momentum));
  bn->to(weight.device());
  bn->train();
  bn->weight.data().copy_(p.gamma);
  bn->bias.data().copy_(p.beta);
  at::Tensor w = p.w.detach().requires_grad_();
  const auto unfused_call = [&] {
    for (at::Tensor* t : {&w, &bn->weight, &bn->bias}) t->mutable_grad().reset();
    const at::Tensor x = p.x.detach().requires_grad_();
    const at::Tensor y = at::conv2d(unfused.bn_relu(*bn, x), w, {}, s.g.stride, s.g.padding);
    y.backward(p.dy);
  };
  const auto fused_call = [&] {
    const bn_finalized f = fused->finalize(p.sum, p.sq_sum, p.gamma, p.beta, p.running_mean, p.running_var);
    fused->forward(p.x, f, p.w);
    fused->backward(p.dy, p.w, p.x, f, p.gamma, p.beta);
  };
  unfused_call();
  fused_call();
  for (int r = 0; r < rounds; ++r) {
    // Alternate which side goes first, so neither always meets the other's leftovers.
    if (r % 2 == 0) {
      out.unfused_ms.push_back(time_calls(unfused_call, calls));
      out.fused_ms.push_back(time_calls(fused_call, calls));
    } else {
      out.fused_ms.push_back(time_calls(fused_call, calls));
      out.unfused_ms.push_back(time_calls(unfused_call, calls));
    }
  }
  return out;
}

}  // namespace trainbench
