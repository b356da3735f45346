// [gpu] tests of backend.compile's fused batch norm (cuda/cudnn_batch_norm.hpp): the cuDNN graphs
// against the reference ops, inside a CUDA graph against eager, and whole models against the
// unfused model. Compiled only against a CUDA LibTorch.
#if TRAINBENCH_CUDA
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#include <torch/nn/modules/batchnorm.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/model_steps.hpp"
#include "gpu/require_cuda.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cudnn_batch_norm.hpp"
#include "trainbench/cuda/cudnn_batch_norm_ex.hpp"
#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/stages/train_step.hpp"

using namespace trainbench;

namespace {

using tbgpu::require_cuda;
using tbgpu::twins;

const c10::Device gpu(c10::kCUDA, 0);

const char* name(at::ScalarType t) {
  return t == at::kHalf ? "fp16" : t == at::kBFloat16 ? "bf16" : "fp32";
}

// max|a - b| <= atol + rtol * max|b|, printed when not.
bool close(const at::Tensor& a, const at::Tensor& b, double atol, double rtol) {
  const at::Tensor x = a.detach().to(at::kCPU, at::kDouble), y = b.detach().to(at::kCPU, at::kDouble);
  const double err = (x - y).abs().max().item<double>(), scale = y.abs().max().item<double>();
  UNSCOPED_INFO("max |difference| " << err << ", max |reference| " << scale);
  return err <= atol + rtol * scale;
}

torch::nn::BatchNorm2d module(const batch_norm_problem& p) {
  torch::nn::BatchNorm2d bn(p.x.size(1));
  bn->to(gpu);
  bn->train();
  at::NoGradGuard no_grad;
  bn->weight.copy_(p.weight);
  bn->bias.copy_(p.bias);
  return bn;
}

struct result {
  at::Tensor y, dx, dw, db, dr, running_mean, running_var;
};

template <class Op>
result run(const batch_norm_problem& p, bool add, Op op) {
  torch::nn::BatchNorm2d bn = module(p);
  const at::Tensor x = p.x.detach().requires_grad_();
  const at::Tensor r = add ? p.residual.detach().requires_grad_() : at::Tensor();
  const at::Tensor y = op(*bn, x, r);
  y.backward(p.dy);
  return {y, x.grad(), bn->weight.grad(), bn->bias.grad(), add ? r.grad() : at::Tensor(), bn->running_mean.clone(),
          bn->running_var.clone()};
}

// op's forward and backward captured in one CUDA graph and replayed once, after a warm-up on the
// capture's side stream (which builds cuDNN's plans for this shape on this thread's and autograd's
// handles), on a module of its own so the captured one starts as an eager one does; then held
// against `eager`: the same kernels on the same inputs, equal up to the order of cuDNN's
// reductions, and the batch counter advanced once.
template <class Op>
void check_captured(const batch_norm_problem& p, bool add, Op op, const result& eager, at::ScalarType dtype) {
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  c10::cuda::device_synchronize();  // the inputs, made on the default stream, are ready
  at::cuda::CUDAGraph graph;
  torch::nn::BatchNorm2d bn = module(p);
  const at::Tensor x = p.x.detach().requires_grad_();
  const at::Tensor r = add ? p.residual.detach().requires_grad_() : at::Tensor();
  at::Tensor y;
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    run(p, add, op);
    c10::cuda::device_synchronize();
    graph.capture_begin();
    y = op(*bn, x, r);
    y.backward(p.dy);
    graph.capture_end();
  }
  c10::cuda::device_synchronize();
  graph.replay();
  c10::cuda::device_synchronize();
  const fused_tolerance t = fused_batch_norm_tolerance(dtype);
  // An engine whose reductions are not bit-identical from call to call may round an element one
  // step of the dtype apart between the eager call and the replay: allow two (a step is at most
  // max|reference| * 2^-mantissa bits).
  const double step = dtype == at::kBFloat16 ? 0x1p-7 : dtype == at::kHalf ? 0x1p-10 : 0x1p-23;
  const double rtol = std::max(t.rtol / 10, 2 * step);
  CHECK(close(y, eager.y, t.atol / 10, rtol));
  CHECK(close(x.grad(), eager.dx, t.atol / 10, rtol));
  if (add) CHECK(close(r.grad(), eager.dr, t.atol / 10, rtol));
  CHECK(close(bn->weight.grad(), eager.dw, 0, 1e-4));
  CHECK(close(bn->bias.grad(), eager.db, 0, 1e-4));
  CHECK(close(bn->running_mean, eager.running_mean, 0, 1e-5));
  CHECK(close(bn->running_var, eager.running_var, 0, 1e-5));
  CHECK(bn->num_batches_tracked.item<std::int64_t>() == 1);
}

void check_against(const result& f, const result& r, at::ScalarType dtype, bool add) {
  const fused_tolerance t = fused_batch_norm_tolerance(dtype);
  CHECK(f.y.scalar_type() == dtype);
  CHECK(f.y.is_contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(close(f.y, r.y, t.atol, t.rtol));
  CHECK(close(f.dx, r.dx, t.atol, t.rtol));
  if (add) CHECK(close(f.dr, r.dr, t.atol, t.rtol));
  CHECK(close(f.dw, r.dw, 0, t.stats_rtol));
  CHECK(close(f.db, r.db, 0, t.stats_rtol));
  CHECK(close(f.running_mean, r.running_mean, 0, t.stats_rtol));
  CHECK(close(f.running_var, r.running_var, 0, t.stats_rtol));
}

// The call the compiled step makes for a fusion the probe passed: relu(bn(x) [+ r]) in the graph
// form it chose, or through cuDNN's batch-norm Ex call where it chose that; bn(x) for the plain one.
at::Tensor probed_call(const cudnn_fusion_check& c, bool plain, torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x,
                       const at::Tensor& r, bool unbias) {
  if (plain) return cudnn_batch_norm(bn, x, unbias);
  if (c.ex_call) return cudnn_ex_batch_norm_relu(bn, x, r, unbias);
  return cudnn_batch_norm_relu(bn, x, r, unbias, c.relu_from_output);
}

// The two fusions every block runs are built; the downsample branch's plain batch norm, which no
// NVIDIA sample builds alone, is reported where cuDNN refuses it (the pipeline then notes it).
void require_block_fusions(const fusion_outcome& o) {
  for (const auto& n : o.ineffective) WARN("not fused: " << n);
  REQUIRE(o.applied.size() >= 2);
  CHECK(o.applied[0].rfind(fusion_bn_relu, 0) == 0);
  CHECK(o.applied[1].rfind(fusion_bn_add_relu, 0) == 0);
  CHECK(o.applied[0].find("unfused") == std::string::npos);
  CHECK(o.applied[1].find("unfused") == std::string::npos);
}

}  // namespace

TEST_CASE("fused batch norm on the GPU: cuDNN batch norm + ReLU, + add + ReLU and plain match the reference in fp16, bf16 and fp32",
          "[gpu]") {
  require_cuda();
  for (const auto dtype : {at::kHalf, at::kBFloat16, at::kFloat}) {
    const cudnn_fusion_probe probe = probe_cudnn_batch_norm(gpu, dtype);
    INFO(name(dtype) << ": probe says bn_relu '" << probe.bn_relu.why << "', bn_add_relu '" << probe.bn_add_relu.why
                     << "', plain '" << probe.batch_norm.why << "'");
    const bool all = probe.bn_relu.works && probe.bn_add_relu.works && probe.batch_norm.works;
    if (dtype == at::kFloat && !all) {
      // fp32 is not what the compile rung runs; where cuDNN has no fp32 kernel the switch says so.
      WARN("fp32: cuDNN's fused batch norm is not available here: " << probe.bn_relu.why << " / "
                                                                      << probe.bn_add_relu.why << " / "
                                                                      << probe.batch_norm.why);
      for (const cudnn_fusion_check* c : {&probe.bn_relu, &probe.bn_add_relu, &probe.batch_norm})
        CHECK(c->works == c->why.empty());
      continue;
    }
    CHECK(probe.bn_relu.works);
    CHECK(probe.bn_add_relu.works);
    if (!probe.bn_relu.works || !probe.bn_add_relu.works) continue;  // the other dtypes still say theirs
    // No NVIDIA sample builds the plain batch norm alone: where cuDNN refuses it, the pipeline
    // notes it and the downsample branch runs unfused.
    if (!probe.batch_norm.works) WARN(name(dtype) << ": the plain fused batch norm is refused: " << probe.batch_norm.why);
    // Evidence for docs/fused-batch-norm.md: which batch variance cuDNN's running variance holds.
    auto kind = [](const cudnn_fusion_check& c) { return c.unbias ? "biased" : "unbiased"; };
    WARN(name(dtype) << ": cuDNN's graph puts the " << kind(probe.bn_relu)
                     << " batch variance into the running variance (batch norm + ReLU), the "
                     << kind(probe.bn_add_relu) << " one (+ add + ReLU), the " << kind(probe.batch_norm)
                     << " one (plain)");
    auto form = [](const cudnn_fusion_check& c) {
      if (c.ex_call) return "cuDNN's Ex call (no graph form built)";
      return c.relu_from_output ? "from the output" : "a bit mask";
    };
    WARN(name(dtype) << ": the ReLU's gradient: " << form(probe.bn_relu) << " (batch norm + ReLU), "
                     << form(probe.bn_add_relu) << " (+ add + ReLU); the mask's refusal, where it was: '"
                     << probe.bn_relu.mask_refusal << "' / '" << probe.bn_add_relu.mask_refusal
                     << "'; the graphs' refusal, where the Ex call runs: '" << probe.bn_relu.graph_refusal << "' / '"
                     << probe.bn_add_relu.graph_refusal << "'");
    for (const int variant : {0, 1, 2}) {  // + ReLU, + add + ReLU, plain
      const bool add = variant == 1, plain = variant == 2;
      const cudnn_fusion_check& check = plain ? probe.batch_norm : add ? probe.bn_add_relu : probe.bn_relu;
      if (!check.works) continue;
      const bool unbias = check.unbias;
      auto fused_op = [&check, unbias, plain](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x,
                                             const at::Tensor& r) {
        return probed_call(check, plain, bn, x, r, unbias);
      };
      auto reference_op = [plain](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& r) {
        return plain ? reference_batch_norm(bn, x) : reference_batch_norm_relu(bn, x, r);
      };
      // ResNet-like shapes: an early wide map, a late deep one, and channels not a power of two.
      for (const std::array<std::int64_t, 4> shape : {std::array<std::int64_t, 4>{16, 64, 28, 28},
                                                      std::array<std::int64_t, 4>{32, 512, 7, 7},
                                                      std::array<std::int64_t, 4>{8, 96, 9, 9}}) {
        INFO(name(dtype) << (plain ? " plain" : add ? " with add" : " no add") << ", shape " << shape[0] << "x"
                         << shape[1] << "x" << shape[2] << "x" << shape[3]);
        const batch_norm_problem p = make_batch_norm_problem(shape, dtype, add, 42, gpu);
        const result fused = run(p, add, fused_op);
        const result ref = run(p, add, reference_op);
        check_against(fused, ref, dtype, add);
        // Tighter than the tolerance: PyTorch's unbiased running variance, corrected where cuDNN's is not.
        const at::Tensor ones = at::ones({shape[1]}, at::kFloat);
        CHECK(classify_running_var(fused.running_var, ones, p.x, 0.1) == running_var_kind::unbiased);
      }
    }
  }
}

TEST_CASE("fused batch norm on the GPU: both forms of the ReLU's gradient, bit mask and saved output, match the reference where cuDNN builds them",
          "[gpu]") {
  require_cuda();
  for (const auto dtype : {at::kHalf, at::kBFloat16})
    for (const bool add : {false, true}) {
      int built = 0;  // of the two forms: the compile rung needs one of each fusion
      for (const bool from_output : {false, true}) {
        INFO(name(dtype) << (add ? " with add" : " no add") << (from_output ? ", from the output" : ", bit mask"));
        const batch_norm_problem p = make_batch_norm_problem({16, 64, 28, 28}, dtype, add, 7, gpu);
        torch::nn::BatchNorm2d shape_of = module(p);
        const std::string refused = cudnn_batch_norm_refusal(*shape_of, p.x.sizes(), dtype, true, add, from_output);
        if (!refused.empty()) {
          WARN(name(dtype) << (add ? " + add + ReLU" : " + ReLU") << (from_output ? ", from the output" : ", bit mask")
                           << ": cuDNN refuses it: " << refused);
          continue;
        }
        ++built;
        // Which batch variance the graph's running variance holds, as the probe finds it.
        bool unbias = false;
        {
          torch::nn::BatchNorm2d bn = module(p);
          const at::Tensor before = bn->running_var.clone();
          const at::NoGradGuard no_grad;
          cudnn_batch_norm_relu(*bn, p.x, add ? p.residual : at::Tensor(), false, from_output);
          const running_var_kind k = classify_running_var(bn->running_var, before, p.x, 0.1);
          REQUIRE(k != running_var_kind::neither);
          unbias = k == running_var_kind::biased;
        }
        const result fused = run(p, add, [&](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& r) {
          return cudnn_batch_norm_relu(bn, x, r, unbias, from_output);
        });
        const result ref = run(p, add, [](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& r) {
          return reference_batch_norm_relu(bn, x, r);
        });
        check_against(fused, ref, dtype, add);
      }
      INFO(name(dtype) << (add ? " + add + ReLU" : " + ReLU"));
      CHECK(built > 0);
    }
}

TEST_CASE("fused batch norm on the GPU: forward and backward captured in a CUDA graph match the eager call", "[gpu]") {
  require_cuda();
  for (const auto dtype : {at::kHalf, at::kBFloat16}) {
    const cudnn_fusion_probe probe = probe_cudnn_batch_norm(gpu, dtype);  // the form each fusion runs in
    for (const int variant : {0, 1, 2})  // + ReLU, + add + ReLU, plain
    for (const bool unbias : {false, true}) {
      // Both ways, whatever the probe finds: the running-variance correction is captured too.
      const bool add = variant == 1, plain = variant == 2;
      INFO(name(dtype) << (plain ? " plain" : add ? " with add" : " no add")
                       << (unbias ? ", running variance corrected" : ""));
      const batch_norm_problem p = make_batch_norm_problem({16, 128, 14, 14}, dtype, add, 5, gpu);
      // With ReLU, the form the probe chose, as the compile rung runs it.
      const cudnn_fusion_check& check = plain ? probe.batch_norm : add ? probe.bn_add_relu : probe.bn_relu;
      {
        torch::nn::BatchNorm2d shape_of = module(p);
        const std::string refused = cudnn_batch_norm_refusal(*shape_of, p.x.sizes(), dtype, !plain, add, check);
        if (plain && (!check.works || !refused.empty())) {
          WARN("the plain fused batch norm is not run: " << (check.works ? refused : check.why));
          continue;
        }
        INFO("the probe: " << check.why);
        REQUIRE(check.works);
        REQUIRE(refused.empty());
      }
      auto fused_op = [&check, unbias, plain](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x,
                                             const at::Tensor& r) {
        return probed_call(check, plain, bn, x, r, unbias);
      };
      check_captured(p, add, fused_op, run(p, add, fused_op), dtype);
    }
  }
}

// The second route of the two ReLU fusions, whatever the probe picks on this GPU: the next GPU
// run says whether cuDNN 9 still runs the Ex calls with the add and the ReLU on it, and how close.
TEST_CASE("fused batch norm on the GPU: cuDNN's batch-norm Ex call with ReLU, and with add + ReLU, matches the reference in fp16, eager and in a CUDA graph",
          "[gpu]") {
  require_cuda();
  REQUIRE(cudnn_ex_unavailable(at::kHalf).empty());
  for (const bool add : {false, true}) {
    for (const std::array<std::int64_t, 4> shape : {std::array<std::int64_t, 4>{16, 64, 28, 28},
                                                    std::array<std::int64_t, 4>{32, 512, 7, 7},
                                                    std::array<std::int64_t, 4>{8, 96, 9, 9}}) {
      INFO((add ? "with add" : "no add") << ", shape " << shape[0] << "x" << shape[1] << "x" << shape[2] << "x"
                                         << shape[3]);
      const batch_norm_problem p = make_batch_norm_problem(shape, at::kHalf, add, 11, gpu);
      {
        torch::nn::BatchNorm2d shape_of = module(p);
        const std::string refused = cudnn_ex_refusal(*shape_of, p.x.sizes(), at::kHalf, add);
        INFO("cuDNN: " << refused);
        REQUIRE(refused.empty());
      }
      // Which batch variance its running variance holds (PyTorch's own cuDNN batch norm relies on
      // the unbiased one).
      bool unbias = false;
      {
        torch::nn::BatchNorm2d bn = module(p);
        const at::Tensor before = bn->running_var.clone();
        const at::NoGradGuard no_grad;
        cudnn_ex_batch_norm_relu(*bn, p.x, add ? p.residual : at::Tensor());
        const running_var_kind k = classify_running_var(bn->running_var, before, p.x, 0.1);
        WARN("the Ex call puts the " << running_var_kind_name(k) << " batch variance into the running variance");
        REQUIRE(k != running_var_kind::neither);
        unbias = k == running_var_kind::biased;
      }
      auto ex_op = [unbias](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& r) {
        return cudnn_ex_batch_norm_relu(bn, x, r, unbias);
      };
      const result eager = run(p, add, ex_op);
      const result ref = run(p, add, [](torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& r) {
        return reference_batch_norm_relu(bn, x, r);
      });
      check_against(eager, ref, at::kHalf, add);
      check_captured(p, add, ex_op, eager, at::kHalf);
    }
  }
}

TEST_CASE("fused batch norm on the GPU: ResNet-18 and ResNet-50 with fused batch norm train like the unfused model, fp16 and bf16",
          "[gpu]") {
  require_cuda();
  struct variant {
    amp_mode amp;
    fused_bn_route route;
  };
  // fp16 twice: the route the probe picks, and cuDNN's Ex call alone (the graphs' fallback).
  for (const std::string arch : {"resnet18", "resnet50"}) {
    for (const variant v : {variant{amp_mode::fp16, fused_bn_route::automatic},
                            variant{amp_mode::bf16, fused_bn_route::automatic},
                            variant{amp_mode::fp16, fused_bn_route::ex}}) {
      const amp_mode amp = v.amp;
      const bool fp16 = amp == amp_mode::fp16;
      INFO(arch << (fp16 ? " fp16" : " bf16") << (v.route == fused_bn_route::ex ? ", cuDNN's Ex call" : ""));
      auto [fused, plain] = twins(arch);
      fusion_request req;
      req.device = gpu;
      req.amp = amp;
      req.channels_last = true;
      req.input_shape = {32, 3, 64, 64};  // every shape checked against cuDNN before the first step
      req.route = v.route;
      const fusion_outcome o = fuse_batch_norm(fused, req);
      require_block_fusions(o);
      if (v.route == fused_bn_route::ex) {
        CHECK(o.applied[0].find("Ex call") != std::string::npos);
        CHECK(o.applied[1].find("Ex call") != std::string::npos);
      }
      tbgpu::check_trains_alike(fused, plain, amp);
    }
  }
}

TEST_CASE("fused batch norm on the GPU: the CUDA graph step with fused batch norm trains like the fused eager step, fp16",
          "[gpu]") {
  require_cuda();
  auto [graphed, eager] = twins("resnet18");
  fusion_request req;
  req.device = gpu;
  req.amp = amp_mode::fp16;
  req.channels_last = true;
  require_block_fusions(fuse_batch_norm(graphed, req));
  require_block_fusions(fuse_batch_norm(eager, req));
  tbgpu::check_graph_trains_like_eager(graphed, eager, 16, 64);
}

#endif  // TRAINBENCH_CUDA
