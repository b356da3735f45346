#include "trainbench/cuda/cudnn_batch_norm_ex.hpp"

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#if TRAINBENCH_HAVE_CUDNN_H
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <torch/autograd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>

#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/cudnn_refusal.hpp"
#include "trainbench/util/log.hpp"

// cuDNN 9 marks the batch-norm Ex calls and their descriptors deprecated (the graph API replaces
// them); they are what PyTorch 2.11's own cuDNN batch norm still calls.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace trainbench {
namespace {

// cuDNN's functions, from the libcudnn.so.9 torch has loaded: nothing links cuDNN.
struct ex_api {
  decltype(&cudnnCreateTensorDescriptor) create_tensor = nullptr;
  decltype(&cudnnSetTensor4dDescriptor) set_tensor = nullptr;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor = nullptr;
  decltype(&cudnnDeriveBNTensorDescriptor) derive_bn = nullptr;
  decltype(&cudnnCreateActivationDescriptor) create_activation = nullptr;
  decltype(&cudnnSetActivationDescriptor) set_activation = nullptr;
  decltype(&cudnnDestroyActivationDescriptor) destroy_activation = nullptr;
  decltype(&cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize) forward_workspace = nullptr;
  decltype(&cudnnGetBatchNormalizationBackwardExWorkspaceSize) backward_workspace = nullptr;
  decltype(&cudnnGetBatchNormalizationTrainingExReserveSpaceSize) reserve_size = nullptr;
  decltype(&cudnnBatchNormalizationForwardTrainingEx) forward = nullptr;
  decltype(&cudnnBatchNormalizationBackwardEx) backward = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnGetLastErrorString) last_error = nullptr;  // optional: cuDNN's words on a refusal
};

// The API, or null with `why`.
const ex_api* load_api(std::string& why) {
  static std::string failed;
  static const ex_api* api = []() -> const ex_api* {
    void* h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    if (!h) h = dlopen("libcudnn.so.9", RTLD_NOW);
    if (!h) {
      failed = std::string("cannot load libcudnn.so.9: ") + dlerror();
      return nullptr;
    }
    static ex_api a;
    auto sym = [&](auto& f, const char* name) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, name));
      if (!f && failed.empty()) failed = std::string("libcudnn.so.9 has no ") + name;
    };
    sym(a.create_tensor, "cudnnCreateTensorDescriptor");
    sym(a.set_tensor, "cudnnSetTensor4dDescriptor");
    sym(a.destroy_tensor, "cudnnDestroyTensorDescriptor");
    sym(a.derive_bn, "cudnnDeriveBNTensorDescriptor");
    sym(a.create_activation, "cudnnCreateActivationDescriptor");
    sym(a.set_activation, "cudnnSetActivationDescriptor");
    sym(a.destroy_activation, "cudnnDestroyActivationDescriptor");
    sym(a.forward_workspace, "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
    sym(a.backward_workspace, "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
    sym(a.reserve_size, "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
    sym(a.forward, "cudnnBatchNormalizationForwardTrainingEx");
    sym(a.backward, "cudnnBatchNormalizationBackwardEx");
    sym(a.set_stream, "cudnnSetStream");
    sym(a.error_string, "cudnnGetErrorString");
    a.last_error = reinterpret_cast<decltype(a.last_error)>(dlsym(h, "cudnnGetLastErrorString"));
    return failed.empty() ? &a : nullptr;
  }();
  if (!api) why = failed;
  return api;
}

const ex_api& api() {
  std::string why;
  const ex_api* a = load_api(why);
  if (!a) throw std::runtime_error(why);
  return *a;
}

// cuDNN's refusal of a call for its parameters (an unsupported shape, layout or type, not enough
// shared memory), or a shape whose results the check below finds wrong: the fused ops then run
// that shape unfused. Any other status is an error: a null or misaligned pointer, a stream or
// graph mismatch (a defect here), the driver, the architecture, allocation or execution.
struct ex_refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool is_refusal(cudnnStatus_t s) { return cudnn_status_declines(static_cast<int>(s)); }
// model/cudnn_refusal.cpp keeps cuDNN 9's numbers without its header: they must be this header's.
static_assert(CUDNN_STATUS_BAD_PARAM == 2000 && CUDNN_STATUS_NOT_SUPPORTED == 3000 &&
                  CUDNN_STATUS_NOT_SUPPORTED_LAYOUT == 3004 &&
                  CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT == 3010 &&
                  CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM == 3012,
              "cuDNN's status codes moved: update model/cudnn_refusal.cpp");

void check(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  const ex_api& a = api();
  std::string text =
      std::string("cuDNN ") + call + ": " + a.error_string(s) + " (" + std::to_string(static_cast<int>(s)) + ")";
  if (a.last_error) {
    char why[512] = {};
    a.last_error(why, sizeof why);
    if (why[0] != 0) text += ": " + std::string(why);
  }
  if (is_refusal(s)) throw ex_refused(text);
  throw std::runtime_error(text);
}

constexpr cudnnBatchNormMode_t ex_mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

// The activation's NHWC descriptor (x, y, the residual and every gradient share it), the per-channel
// one cuDNN derives for scale, bias and statistics (fp32 for fp16 activations), and the ReLU.
class ex_descriptors {
 public:
  ex_descriptors(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) : a_(api()) {
    try {
      make(n, c, h, w);
    } catch (...) {
      release();
      throw;
    }
  }
  ~ex_descriptors() { release(); }
  ex_descriptors(const ex_descriptors&) = delete;
  ex_descriptors& operator=(const ex_descriptors&) = delete;
  cudnnTensorDescriptor_t x = nullptr, channel = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;

 private:
  void make(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
    check(a_.create_tensor(&x), "cudnnCreateTensorDescriptor");
    check(a_.set_tensor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, static_cast<int>(n), static_cast<int>(c),
                        static_cast<int>(h), static_cast<int>(w)),
          "cudnnSetTensor4dDescriptor");
    check(a_.create_tensor(&channel), "cudnnCreateTensorDescriptor");
    check(a_.derive_bn(channel, x, ex_mode), "cudnnDeriveBNTensorDescriptor");
    check(a_.create_activation(&relu), "cudnnCreateActivationDescriptor");
    check(a_.set_activation(relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0), "cudnnSetActivationDescriptor");
  }
  void release() {
    if (relu) a_.destroy_activation(relu);
    if (channel) a_.destroy_tensor(channel);
    if (x) a_.destroy_tensor(x);
    relu = nullptr;
    channel = x = nullptr;
  }
  const ex_api& a_;
};

cudnnBatchNormOps_t ops_of(bool add) {
  return add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}

// On the current stream, this thread's cuDNN handle; workspace and reserve from the caching
// allocator (a CUDA graph's pool during capture).
cudnnHandle_t handle_on_current_stream() {
  cudnnHandle_t handle = at::native::getCudnnHandle();
  check(api().set_stream(handle, at::cuda::getCurrentCUDAStream()), "cudnnSetStream");
  return handle;
}

// Never a null pointer: cuDNN documents that a null workspace of size 0 makes the Ex call the plain
// cudnnBatchNormalizationForwardTraining, which would drop the ReLU and the add.
at::Tensor bytes(std::size_t n, const at::Tensor& like) {
  return at::empty({static_cast<std::int64_t>(std::max<std::size_t>(n, 16))}, like.options().dtype(at::kByte));
}

// The workspace's size as allocated (at least what cuDNN asked for, never 0).
std::size_t workspace_bytes(const at::Tensor& workspace) { return static_cast<std::size_t>(workspace.numel()); }

// What the backward needs of a forward call.
struct ex_saved {
  at::Tensor mean, inv_var, reserve;
  std::size_t reserve_size = 0;  // as cuDNN gave it (the tensor holds at least 16 bytes)
};

// y = relu(bn(x) [+ residual]) with the given parameters and statistics (updated in place with
// momentum, as cuDNN's batch norm does); x, residual NHWC fp16, the rest fp32.
at::Tensor ex_forward(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight, const at::Tensor& bias,
                      const at::Tensor& running_mean, const at::Tensor& running_var, double eps, double momentum,
                      ex_saved& saved) {
  const bool add = residual.defined();
  const ex_descriptors d(x.size(0), x.size(1), x.size(2), x.size(3));
  const cudnnHandle_t handle = handle_on_current_stream();
  const ex_api& a = api();
  std::size_t workspace_size = 0;
  check(a.forward_workspace(handle, ex_mode, ops_of(add), d.x, add ? d.x : nullptr, d.x, d.channel, d.relu,
                            &workspace_size),
        "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize");
  check(a.reserve_size(handle, ex_mode, ops_of(add), d.relu, d.x, &saved.reserve_size),
        "cudnnGetBatchNormalizationTrainingExReserveSpaceSize");
  const at::Tensor workspace = bytes(workspace_size, x);
  saved.reserve = bytes(saved.reserve_size, x);
  const auto f32 = x.options().dtype(at::kFloat);
  saved.mean = at::empty({x.size(1)}, f32);
  saved.inv_var = at::empty({x.size(1)}, f32);
  at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const float one = 1.0f, zero = 0.0f;  // scaling factors are float for half data
  check(a.forward(handle, ex_mode, ops_of(add), &one, &zero, d.x, x.data_ptr(), add ? d.x : nullptr,
                  add ? residual.data_ptr() : nullptr, d.x, y.data_ptr(), d.channel, weight.data_ptr(), bias.data_ptr(),
                  momentum, running_mean.data_ptr(), running_var.data_ptr(), eps, saved.mean.data_ptr(),
                  saved.inv_var.data_ptr(), d.relu, workspace.data_ptr(), workspace_bytes(workspace),
                  saved.reserve.data_ptr(), saved.reserve_size),
        "cudnnBatchNormalizationForwardTrainingEx");
  return y;
}

// dx, dweight, dbias and (with add) the residual's gradient from dy.
struct ex_grads {
  at::Tensor dx, dweight, dbias, dresidual;
};

ex_grads ex_backward(const at::Tensor& x, const at::Tensor& y, const at::Tensor& dy, const at::Tensor& weight,
                     const at::Tensor& bias, double eps, const ex_saved& saved, bool add) {
  const ex_descriptors d(x.size(0), x.size(1), x.size(2), x.size(3));
  const cudnnHandle_t handle = handle_on_current_stream();
  const ex_api& a = api();
  std::size_t workspace_size = 0;
  check(a.backward_workspace(handle, ex_mode, ops_of(add), d.x, d.x, d.x, add ? d.x : nullptr, d.x, d.channel, d.relu,
                             &workspace_size),
        "cudnnGetBatchNormalizationBackwardExWorkspaceSize");
  const at::Tensor workspace = bytes(workspace_size, x);
  ex_grads g;
  g.dx = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  g.dweight = at::empty_like(weight);
  g.dbias = at::empty_like(weight);
  if (add) g.dresidual = at::empty_like(x, at::MemoryFormat::ChannelsLast);
  const float one = 1.0f, zero = 0.0f;
  check(a.backward(handle, ex_mode, ops_of(add), &one, &zero, &one, &zero, d.x, x.data_ptr(), d.x, y.data_ptr(), d.x,
                   dy.data_ptr(), add ? d.x : nullptr, add ? g.dresidual.data_ptr() : nullptr, d.x, g.dx.data_ptr(),
                   d.channel, weight.data_ptr(), bias.data_ptr(), g.dweight.data_ptr(), g.dbias.data_ptr(), eps,
                   saved.mean.data_ptr(), saved.inv_var.data_ptr(), d.relu, workspace.data_ptr(),
                   workspace_bytes(workspace), saved.reserve.data_ptr(), saved.reserve_size),
        "cudnnBatchNormalizationBackwardEx");
  return g;
}

at::Tensor nhwc(const at::Tensor& t) { return t.contiguous(at::MemoryFormat::ChannelsLast); }

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The forward of both Functions. residual: undefined for batch norm + ReLU.
at::Tensor function_forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& residual_in, const at::Tensor& running_mean,
                            const at::Tensor& running_var, double eps, double momentum, bool unbias) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = nhwc(x_in);
  const at::Tensor residual = residual_in.defined() ? nhwc(residual_in.to(x.scalar_type())) : at::Tensor();
  const at::Tensor w = weight.contiguous(), b = bias.contiguous();
  ex_saved saved;
  const at::Tensor y = ex_forward(x, residual, w, b, running_mean, running_var, eps, momentum, saved);
  // cuDNN updated running_var in place; where it holds the biased variance, made unbiased.
  if (unbias)
    unbias_running_var(running_var, running_var, saved.inv_var, eps, momentum, x.size(0) * x.size(2) * x.size(3));
  ctx->save_for_backward({x, w, b, y});
  ctx->saved_data["mean"] = saved.mean;
  ctx->saved_data["inv_var"] = saved.inv_var;
  ctx->saved_data["reserve"] = saved.reserve;
  ctx->saved_data["reserve_size"] = static_cast<std::int64_t>(saved.reserve_size);
  ctx->saved_data["eps"] = eps;
  return y;
}

// The gradients of x, weight and bias, and with add the residual's; `inputs`: how many arguments
// the Function's forward takes, tensors or not.
variable_list function_backward(AutogradContext* ctx, const variable_list& grads, bool add, std::size_t inputs) {
  if (!grads[0].defined()) return variable_list(inputs);
  const variable_list s = ctx->get_saved_variables();
  const at::Tensor &x = s[0], &w = s[1], &b = s[2], &y = s[3];
  const c10::cuda::CUDAGuard guard(x.device());
  ex_saved saved;
  saved.mean = ctx->saved_data["mean"].toTensor();
  saved.inv_var = ctx->saved_data["inv_var"].toTensor();
  saved.reserve = ctx->saved_data["reserve"].toTensor();
  saved.reserve_size = static_cast<std::size_t>(ctx->saved_data["reserve_size"].toInt());
  const ex_grads g =
      ex_backward(x, y, nhwc(grads[0].to(x.scalar_type())), w, b, ctx->saved_data["eps"].toDouble(), saved, add);
  variable_list out = {g.dx, g.dweight, g.dbias};
  if (add) out.push_back(g.dresidual);
  out.resize(inputs);  // running_mean, running_var, eps, momentum, unbias: no gradient
  return out;
}

// Two Functions, as for the graphs: an undefined tensor argument cannot be a Function's input
// (autograd records each tensor argument's device), so batch norm + ReLU takes no residual.
class ex_relu_function : public torch::autograd::Function<ex_relu_function> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& running_mean, const at::Tensor& running_var, double eps, double momentum,
                            bool unbias) {
    return function_forward(ctx, x, weight, bias, at::Tensor(), running_mean, running_var, eps, momentum, unbias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return function_backward(ctx, grads, false, 8);
  }
};

class ex_add_relu_function : public torch::autograd::Function<ex_add_relu_function> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            const at::Tensor& residual, const at::Tensor& running_mean, const at::Tensor& running_var,
                            double eps, double momentum, bool unbias) {
    return function_forward(ctx, x, weight, bias, residual, running_mean, running_var, eps, momentum, unbias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return function_backward(ctx, grads, true, 9);
  }
};

// max|got - want| <= 1e-2 + 1e-2 * scale (fp16's tolerance against the reference; scale: max|want|
// unless given), else a text.
std::string mismatch(const char* what, const at::Tensor& got, const at::Tensor& want, double scale = -1) {
  const at::Tensor g = got.to(at::kFloat), w = want.to(at::kFloat);
  const double err = (g - w).abs().max().item<double>();
  if (scale < 0) scale = w.abs().max().item<double>();
  if (err <= 1e-2 + 1e-2 * scale) return "";
  std::ostringstream os;
  os << what << " differs from what it should be by " << err << " (scale " << scale << ")";
  return os.str();
}

// Shapes decided: by (device, add, N, C, H, W, eps), "" or why not.
class ex_shapes {
 public:
  static ex_shapes& instance() {
    static ex_shapes* s = new ex_shapes();  // never destroyed: may be asked during static teardown
    return *s;
  }
  std::string refusal(at::IntArrayRef nchw, bool add, double eps, c10::Device device) {
    const auto key = std::make_tuple(device.index(), add, nchw[0], nchw[1], nchw[2], nchw[3], eps);
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      const auto it = decided_.find(key);
      if (it != decided_.end()) return it->second;
    }
    if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None)
      throw std::runtime_error(
          "fused batch norm: a new shape during CUDA graph capture; cuDNN's Ex call must be "
          "tried on it by an eager step first");
    std::string why;
    if (nchw[1] % 4 != 0) {
      why = "taken for channels in multiples of 4 only (cuDNN's documentation gives that limit for the add), not " +
            std::to_string(nchw[1]);
    } else {
      try {
        why = try_once(nchw, add, eps, device);
      } catch (const ex_refused& e) {
        why = e.what();
      }
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto [it, added] = decided_.emplace(key, why);
    if (added && !why.empty())
      log_warn("fused batch norm: cuDNN's Ex call (batch norm" + std::string(add ? " + add" : "") + " + ReLU) for " +
               std::to_string(nchw[0]) + "x" + std::to_string(nchw[1]) + "x" + std::to_string(nchw[2]) + "x" +
               std::to_string(nchw[3]) + ": " + why + "; batch norms of that shape run unfused");
    return it->second;
  }

 private:
  // The forward and the backward once on made-up data of the shape, with parameters and
  // statistics of their own, then checked: the saved mean and inverse standard deviation against
  // the batch's, the output against relu(bn(x) [+ z]) from them (a kernel that dropped the ReLU or
  // the add differs), the bias's gradient against the sum of dY where the output is positive (the
  // ReLU's mask in the backward), and the residual's gradient against dY there. Elements whose
  // pre-activation is within 1e-3 of zero are left out of the masked comparisons: fp16 rounding may
  // put them on either side. "" where it holds.
  static std::string try_once(at::IntArrayRef nchw, bool add, double eps, c10::Device device) {
    const at::NoGradGuard no_grad;
    const auto f32 = at::TensorOptions().device(device).dtype(at::kFloat);
    // Element i (NHWC order, channel i mod C): ((50 i + salt) mod 61 - 30) / 8, plus (channel mod 16)
    // / 2 so the channels' means differ: on a 1/8 grid below 12 (exact in fp16), made on the device,
    // no random generator touched. int32 holds every index (fewer than 2^31 elements:
    // cudnn_batch_norm_fits) and, reduced mod 61 first, every product.
    const std::int64_t numel = nchw[0] * nchw[1] * nchw[2] * nchw[3];
    const auto nhwc_half = [&](std::int64_t salt) {
      const at::Tensor i = at::arange(numel, f32.dtype(at::kInt));
      const at::Tensor offset = i.remainder(nchw[1]).remainder_(16).mul_(4);
      const at::Tensor v = i.remainder(61).mul_(50).add_(salt).remainder_(61).sub_(30).add_(offset);
      return v.to(at::kHalf).div_(8).view({nchw[0], nchw[2], nchw[3], nchw[1]}).permute({0, 3, 1, 2});
    };
    const at::Tensor x = nhwc_half(1), residual = add ? nhwc_half(17) : at::Tensor(), dy = nhwc_half(29);
    const std::int64_t c = nchw[1];
    const at::Tensor weight = at::linspace(0.5, 1.5, c, f32), bias = at::linspace(-0.2, 0.2, c, f32);
    const at::Tensor mean = at::zeros({c}, f32), var = at::ones({c}, f32);
    ex_saved saved;
    const at::Tensor y = ex_forward(x, residual, weight, bias, mean, var, eps, 0.1, saved);
    const ex_grads g = ex_backward(x, y, dy, weight, bias, eps, saved, add);
    const auto channel = [](const at::Tensor& t) { return t.view({1, -1, 1, 1}); };
    const at::Tensor xf = x.to(at::kFloat), dyf = dy.to(at::kFloat);
    std::string why = mismatch("its batch mean", saved.mean, xf.mean({0, 2, 3}));
    if (why.empty())
      why = mismatch("its inverse standard deviation", saved.inv_var, xf.var({0, 2, 3}, false).add(eps).rsqrt());
    at::Tensor pre = (xf - channel(saved.mean)) * channel(saved.inv_var) * channel(weight) + channel(bias);
    if (add) pre = pre + residual.to(at::kFloat);
    if (why.empty()) why = mismatch("its output", y, pre.relu());
    const at::Tensor clear = pre.abs() > 1e-3, positive = pre > 1e-3;  // the elements whose ReLU is certain
    const at::Tensor masked = dyf * positive;
    if (why.empty()) {
      // Per channel, within fp32 summation's error, plus whatever the elements left out add.
      const at::Tensor err = (g.dbias - masked.sum({0, 2, 3})).abs();
      const at::Tensor allowed =
          (dyf.abs() * positive).sum({0, 2, 3}).mul(1e-4).add(1e-2) + (dyf.abs() * clear.logical_not()).sum({0, 2, 3});
      if (!(err <= allowed).all().item<bool>())
        why = "its bias's gradient differs from the sum of dY where the output is positive by up to " +
              std::to_string((err - allowed).max().item<double>()) + " beyond fp32 summation";
    }
    if (why.empty() && add) why = mismatch("its residual's gradient", g.dresidual.to(at::kFloat) * clear, masked);
    return why;
  }
  std::mutex mutex_;
  std::map<std::tuple<c10::DeviceIndex, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, double>,
           std::string>
      decided_;
};

}  // namespace

std::string cudnn_ex_unavailable(at::ScalarType dtype) {
  if (dtype != at::kHalf)
    return std::string("trainbench takes cuDNN's batch-norm Ex call for fp16 activations only, not ") +
           c10::toString(dtype);
  std::string why;
  load_api(why);
  return why;
}

torch::Tensor cudnn_ex_batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                       const torch::Tensor& residual, bool unbias_running_var) {
  TORCH_CHECK(x.is_cuda() && x.dim() == 4 && x.scalar_type() == at::kHalf,
              "cudnn_ex_batch_norm_relu: expected a CUDA N,C,H,W fp16 tensor");
  TORCH_CHECK(fusable(bn), "cudnn_ex_batch_norm_relu: the batch norm is not fusable (training mode, momentum set)");
  TORCH_CHECK(bn.weight.scalar_type() == at::kFloat && bn.running_mean.scalar_type() == at::kFloat &&
                  bn.running_var.scalar_type() == at::kFloat && bn.running_mean.is_contiguous() &&
                  bn.running_var.is_contiguous(),
              "cudnn_ex_batch_norm_relu: the batch norm's parameters and statistics must be contiguous fp32");
  TORCH_CHECK(!residual.defined() || (residual.sizes() == x.sizes() && residual.device() == x.device()),
              "cudnn_ex_batch_norm_relu: the residual must have x's shape and device");
  const double eps = bn.options.eps(), momentum = *bn.options.momentum();
  const at::Tensor y = residual.defined()
                           ? ex_add_relu_function::apply(x, bn.weight, bn.bias, residual, bn.running_mean,
                                                         bn.running_var, eps, momentum, unbias_running_var)
                           : ex_relu_function::apply(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, eps,
                                                     momentum, unbias_running_var);
  {
    at::NoGradGuard no_grad;
    bn.num_batches_tracked.add_(1);
  }
  return y;
}

std::string cudnn_ex_refusal(const torch::nn::BatchNorm2dImpl& bn, at::IntArrayRef nchw, at::ScalarType dtype,
                             bool add) {
  TORCH_CHECK(nchw.size() == 4, "cudnn_ex_refusal: expected N, C, H, W");
  std::string why = cudnn_ex_unavailable(dtype);
  if (!why.empty()) return why;
  const c10::Device device = bn.weight.device();
  const c10::cuda::CUDAGuard guard(device);
  return ex_shapes::instance().refusal(nchw, add, bn.options.eps(), device);
}

}  // namespace trainbench

#else  // no cudnn.h at build time

namespace trainbench {

namespace {
const char* const missing =
    "cudnn.h was not found when trainbench was built (scripts/setup.sh installs the wheel's cuDNN)";
}

std::string cudnn_ex_unavailable(at::ScalarType) { return missing; }
torch::Tensor cudnn_ex_batch_norm_relu(torch::nn::BatchNorm2dImpl&, const torch::Tensor&, const torch::Tensor&, bool) {
  throw std::runtime_error(missing);
}
std::string cudnn_ex_refusal(const torch::nn::BatchNorm2dImpl&, at::IntArrayRef, at::ScalarType, bool) {
  return missing;
}

}  // namespace trainbench

#endif
