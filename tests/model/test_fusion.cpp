// backend.compile's fused batch norm on the CPU: the reference ops (what the cuDNN graphs must
// match, tests/gpu/test_fused_batch_norm.cpp) against the unfused model, and fuse_batch_norm's
// choices and reasons where no GPU is reached.
#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/nn/modules/batchnorm.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "model_twins.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cudnn_batch_norm.hpp"
#include "trainbench/cuda/cudnn_batch_norm_ex.hpp"
#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/model/resnet.hpp"

using namespace trainbench;

namespace {

using tbtest::relative;

torch::nn::BatchNorm2d module(const batch_norm_problem& p) {
  torch::nn::BatchNorm2d bn(p.x.size(1));
  bn->to(p.weight.scalar_type());
  bn->train();
  at::NoGradGuard no_grad;
  bn->weight.copy_(p.weight);
  bn->bias.copy_(p.bias);
  return bn;
}

// Two copies of an architecture with the same weights and statistics; the first runs the
// reference ops through fuse_batch_norm.
std::pair<resnet, resnet> twins(const std::string& arch, at::ScalarType dtype) {
  at::manual_seed(7);
  resnet fused = make_resnet(arch, 10), plain = make_resnet(arch, 10);
  fused->to(dtype);
  plain->to(dtype);
  tbtest::copy_model_state(fused, plain);
  fusion_request r;
  r.cpu_reference = true;
  const fusion_outcome o = fuse_batch_norm(fused, r);
  REQUIRE(o.applied.size() == 3);
  REQUIRE(o.ineffective.empty());
  return {fused, plain};
}

// Plain SGD, so that the comparison is of the model alone.
void sgd(resnet& m, double lr) {
  at::NoGradGuard no_grad;
  for (auto& p : m->parameters()) {
    p.sub_(p.grad(), lr);
    p.mutable_grad().zero_();
  }
}

}  // namespace

TEST_CASE("fused batch norm: the reference op matches BatchNorm2d + ReLU (and + add + ReLU) in float32 and float64") {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    for (const bool add : {false, true}) {
      INFO((dtype == at::kFloat ? "float32" : "float64") << (add ? ", with add" : ", no add"));
      const batch_norm_problem p = make_batch_norm_problem({4, 16, 5, 6}, dtype, add, 11, c10::kCPU);
      torch::nn::BatchNorm2d ref = module(p), plain = module(p);
      const at::Tensor xr = p.x.detach().requires_grad_(), xp = p.x.detach().requires_grad_();
      const at::Tensor rr = add ? p.residual.detach().requires_grad_() : at::Tensor();
      const at::Tensor rp = add ? p.residual.detach().requires_grad_() : at::Tensor();
      const at::Tensor yr = reference_batch_norm_relu(*ref, xr, rr);
      const at::Tensor yp = add ? plain(xp).add_(rp).relu_() : plain(xp).relu_();
      yr.backward(p.dy);
      yp.backward(p.dy);
      const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
      CHECK(yr.scalar_type() == dtype);
      CHECK(yr.is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK(relative(yr, yp) < tol);
      CHECK(relative(xr.grad(), xp.grad()) < tol);
      CHECK(relative(ref->weight.grad(), plain->weight.grad()) < tol);
      CHECK(relative(ref->bias.grad(), plain->bias.grad()) < tol);
      if (add) CHECK(relative(rr.grad(), rp.grad()) < tol);
      CHECK(relative(ref->running_mean, plain->running_mean) < tol);
      CHECK(relative(ref->running_var, plain->running_var) < tol);
      CHECK(ref->num_batches_tracked.item<std::int64_t>() == 1);
      CHECK(plain->num_batches_tracked.item<std::int64_t>() == 1);
      // The problem keeps every pre-ReLU value away from zero, and the ReLU does clip.
      const double clipped = (yp == 0).to(at::kDouble).mean().item<double>();
      CHECK(clipped > 0.2);
      CHECK(clipped < 0.8);
    }
  }
}

TEST_CASE("fused batch norm: the plain reference op (the downsample branch's) matches BatchNorm2d in float32 and float64") {
  for (const auto dtype : {at::kFloat, at::kDouble}) {
    INFO((dtype == at::kFloat ? "float32" : "float64"));
    const batch_norm_problem p = make_batch_norm_problem({4, 16, 5, 6}, dtype, false, 12, c10::kCPU);
    torch::nn::BatchNorm2d ref = module(p), plain = module(p);
    const at::Tensor xr = p.x.detach().requires_grad_(), xp = p.x.detach().requires_grad_();
    const at::Tensor yr = reference_batch_norm(*ref, xr), yp = plain(xp);
    yr.backward(p.dy);
    yp.backward(p.dy);
    const double tol = dtype == at::kFloat ? 1e-5 : 1e-12;
    CHECK(yr.scalar_type() == dtype);
    CHECK(yr.is_contiguous(at::MemoryFormat::ChannelsLast));
    CHECK((yr < 0).any().item<bool>());  // no ReLU
    CHECK(relative(yr, yp) < tol);
    CHECK(relative(xr.grad(), xp.grad()) < tol);
    CHECK(relative(ref->weight.grad(), plain->weight.grad()) < tol);
    CHECK(relative(ref->bias.grad(), plain->bias.grad()) < tol);
    CHECK(relative(ref->running_mean, plain->running_mean) < tol);
    CHECK(relative(ref->running_var, plain->running_var) < tol);
    CHECK(ref->num_batches_tracked.item<std::int64_t>() == 1);
  }
}

TEST_CASE("fused batch norm: the downsample branch's batch norm goes through the model's ops") {
  // A counting stand-in for the ops: every batch norm of ResNet-18 and ResNet-50 is reached, the
  // downsample ones through batch_norm(), so the fused ops see each of them.
  struct counting final : batch_norm_ops {
    int relu = 0, add_relu = 0, plain = 0;
    torch::Tensor bn_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
      ++relu;
      return bn.forward(x).relu_();
    }
    torch::Tensor bn_add_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                              const torch::Tensor& residual) override {
      ++add_relu;
      return bn.forward(x).add_(residual).relu_();
    }
    torch::Tensor batch_norm(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x) override {
      ++plain;
      return bn.forward(x);
    }
  };
  struct expected {
    const char* arch;
    int relu, add_relu, plain;
  };
  // ResNet-18: the stem and one per basic block (8), the blocks' last (8), 3 downsamples.
  // ResNet-50: the stem and two per bottleneck (16 x 2), the blocks' last (16), 4 downsamples.
  for (const expected e : {expected{"resnet18", 9, 8, 3}, expected{"resnet50", 33, 16, 4}}) {
    INFO(e.arch);
    resnet m = make_resnet(e.arch, 10);
    auto ops = std::make_shared<counting>();
    m->set_batch_norm_ops(ops);
    m->train();
    m->forward(at::randn({2, 3, 32, 32}));
    CHECK(ops->relu == e.relu);
    CHECK(ops->add_relu == e.add_relu);
    CHECK(ops->plain == e.plain);
    int modules = 0;
    for (const auto& sub : m->modules(/*include_self=*/false))
      if (sub->as<torch::nn::BatchNorm2d>()) ++modules;
    CHECK(modules == e.relu + e.add_relu + e.plain);
  }
}

TEST_CASE("fused batch norm: ResNet-18 and ResNet-50 with the reference ops train like the unfused model") {
  for (const std::string arch : {"resnet18", "resnet50"}) {
    for (const auto dtype : {at::kFloat, at::kDouble}) {
      INFO(arch << (dtype == at::kFloat ? ", float32" : ", float64"));
      auto [fused, plain] = twins(arch, dtype);
      fused->train();
      plain->train();
      at::manual_seed(3);
      const bool f64 = dtype == at::kDouble;
      const std::int64_t size = f64 ? 32 : 64;
      const at::Tensor x = at::randn({4, 3, size, size}).to(dtype);
      const at::Tensor labels = at::randint(10, {4}, at::kLong);
      // float64: the whole comparison, three steps. float32: the first step only, loosely. At
      // batch 4 the last layers' batch norms reduce over few values (16 to 64 at 64 px), where a
      // nearly constant channel gets an inverse standard deviation of up to 1/sqrt(eps): float32
      // rounding, amplified through a few of them, moves the lower layers' gradients by up to
      // 2.4% (the worst over 1 to 4 intra-op threads, whose reductions round differently; at
      // 32 px, 4 values per channel, one thread reached 9%), and SGD on batch 4 amplifies that
      // further step by step. A wrong formula (a variance factor, a missing term) moves them by
      // far more; float64 holds them to 1e-5.
      const double tol = f64 ? 1e-5 : 5e-2;
      std::vector<double> fused_loss, plain_loss;
      for (int step = 0; step < (f64 ? 3 : 1); ++step) {
        const at::Tensor of = fused->forward(x), op = plain->forward(x);
        if (step == 0) CHECK(relative(of, op) < (f64 ? 1e-9 : 1e-2));
        const at::Tensor lf = at::cross_entropy_loss(of, labels), lp = at::cross_entropy_loss(op, labels);
        lf.backward();
        lp.backward();
        fused_loss.push_back(lf.item<double>());
        plain_loss.push_back(lp.item<double>());
        if (step == 0) {
          const auto pf = fused->named_parameters(), pp = plain->named_parameters();
          for (const auto& item : pf) {
            INFO(item.key());
            CHECK(relative(item.value().grad(), pp[item.key()].grad()) < tol);
          }
        }
        sgd(fused, 0.05);
        sgd(plain, 0.05);
      }
      for (std::size_t i = 0; i < fused_loss.size(); ++i) CHECK(fused_loss[i] == Approx(plain_loss[i]).epsilon(tol));
      tbtest::check_buffers_close(fused, plain, tol);
    }
  }
}

TEST_CASE("fused batch norm: which batch variance a running variance holds is told apart, and a biased one is made unbiased") {
  // The probe asks this of cuDNN's graph, whose documentation does not say. The problem's 256
  // values per channel put the two candidates 1/255 of momentum * variance apart: about 6e-4,
  // far above float32's rounding of the statistics.
  const batch_norm_problem p = make_batch_norm_problem({4, 64, 8, 8}, at::kHalf, false, 1234, c10::kCPU);
  torch::nn::BatchNorm2d bn(64);
  bn->train();
  const double momentum = *bn->options.momentum(), eps = bn->options.eps();
  const at::Tensor before = bn->running_var.clone();
  reference_batch_norm_relu(*bn, p.x, at::Tensor());
  CHECK(classify_running_var(bn->running_var, before, p.x, momentum) == running_var_kind::unbiased);
  CHECK(classify_running_var(before, before, p.x, momentum) == running_var_kind::neither);

  // An update made with the biased variance, in float32, with the inverse standard deviation a
  // batch norm saves: what a graph that normalises and updates with one variance would leave.
  const at::Tensor xf = p.x.to(at::kFloat);
  const at::Tensor var = xf.var({0, 2, 3}, /*unbiased=*/false);
  const at::Tensor inv_std = (var + eps).rsqrt();
  const at::Tensor next = before * (1 - momentum) + var * momentum;
  CHECK(classify_running_var(next, before, p.x, momentum) == running_var_kind::biased);
  CHECK(classify_running_var(next * 1.01, before, p.x, momentum) == running_var_kind::neither);
  CHECK(std::string(running_var_kind_name(running_var_kind::biased)) == "the biased batch variance");

  const at::Tensor fixed = at::empty_like(next);
  unbias_running_var(fixed, next, inv_std, eps, momentum, 4 * 8 * 8);
  CHECK(classify_running_var(fixed, before, p.x, momentum) == running_var_kind::unbiased);
  CHECK(relative(fixed, bn->running_var) < 1e-6);
}

TEST_CASE("fuse_batch_norm: the CPU keeps the unfused ops unless asked for the reference, and says why") {
  resnet m = make_resnet("resnet18", 10);
  fusion_request r;
  fusion_outcome o = fuse_batch_norm(m, r);
  CHECK(o.applied.empty());
  REQUIRE(o.ineffective.size() == 3);
  CHECK(o.ineffective[0] == "batch norm + ReLU: no fused kernel on the CPU; the unfused ops run");
  CHECK(o.ineffective[1] == "batch norm + add + ReLU: no fused kernel on the CPU; the unfused ops run");
  CHECK(o.ineffective[2] == "downsample batch norm: no fused kernel on the CPU; the unfused ops run");

  r.cpu_reference = true;
  o = fuse_batch_norm(m, r);
  CHECK(o.ineffective.empty());
  CHECK(o.applied == std::vector<std::string>{"batch norm + ReLU (CPU reference ops)",
                                              "batch norm + add + ReLU (CPU reference ops)",
                                              "downsample batch norm (CPU reference ops)"});
}

TEST_CASE("fuse_batch_norm: on a GPU, NCHW and float64 keep the unfused ops, with the reason (decided before any GPU work)") {
  resnet m = make_resnet("resnet18", 10);
  fusion_request r;
  r.device = c10::Device(c10::kCUDA, 0);
  r.amp = amp_mode::fp16;
  fusion_outcome o = fuse_batch_norm(m, r);
  CHECK(o.applied.empty());
  REQUIRE(o.ineffective.size() == 3);
  CHECK(o.ineffective[0] ==
        "batch norm + ReLU: cuDNN's fused batch norm runs NHWC only (this run is NCHW: set channels_last)");

  m->to(at::kDouble);
  r.channels_last = true;
  r.amp = amp_mode::off;
  o = fuse_batch_norm(m, r);
  CHECK(o.applied.empty());
  REQUIRE(o.ineffective.size() == 3);
  CHECK(o.ineffective[1] == "batch norm + add + ReLU: no cuDNN fusion in fp64");
  CHECK(o.ineffective[2] == "downsample batch norm: no cuDNN fusion in fp64");
}

TEST_CASE("fuse_batch_norm: a CUDA request on a host without a GPU reports every fusion ineffective and keeps the unfused ops") {
  if (torch::cuda::is_available()) {
    SUCCEED("this host has a GPU: the [gpu] tests of fused batch norm cover it");
    return;
  }
  at::manual_seed(1);
  resnet m = make_resnet("resnet18", 10), plain = make_resnet("resnet18", 10);
  tbtest::copy_model_state(m, plain);
  fusion_request r;
  r.device = c10::Device(c10::kCUDA, 0);
  r.amp = amp_mode::fp16;
  r.channels_last = true;
  const fusion_outcome o = fuse_batch_norm(m, r);
  INFO((o.ineffective.empty() ? std::string() : o.ineffective.front()));
  CHECK(o.applied.empty());
  REQUIRE(o.ineffective.size() == 3);
  CHECK(o.ineffective[0].rfind("batch norm + ReLU: ", 0) == 0);
  CHECK(o.ineffective[0].size() > std::string("batch norm + ReLU: ").size());
  CHECK(o.ineffective[1].rfind("batch norm + add + ReLU: ", 0) == 0);
  CHECK(o.ineffective[2].rfind("downsample batch norm: ", 0) == 0);
  // In fp16 the two ReLU fusions try cuDNN's batch-norm Ex call after the graphs; the plain one does not
  // (a build without the frontend's headers probes neither).
  if (cuda_code_compiled() && o.ineffective[0].find("frontend headers were not found") == std::string::npos) {
    CHECK(o.ineffective[0].find("cuDNN's Ex call: ") != std::string::npos);
    CHECK(o.ineffective[1].find("cuDNN's Ex call: ") != std::string::npos);
    CHECK(o.ineffective[2].find("Ex call") == std::string::npos);
  }
  // The model still runs its unfused ops.
  m->eval();
  plain->eval();
  const at::Tensor x = at::randn({2, 3, 32, 32});
  CHECK(at::equal(m->forward(x), plain->forward(x)));
}

// The second route of the ReLU fusions dlsyms cuDNN's batch-norm Ex functions from the
// libcudnn.so.9 torch has loaded: a misspelt or missing name shows here, not first on a GPU.
TEST_CASE("cuDNN's batch-norm Ex call: its functions are found in the cuDNN torch loads, for fp16 only") {
  if (!cuda_code_compiled()) {
    CHECK_FALSE(cudnn_ex_unavailable(at::kHalf).empty());
    return;
  }
  CHECK(cudnn_ex_unavailable(at::kHalf).empty());
  CHECK(cudnn_ex_unavailable(at::kBFloat16).find("fp16 activations only") != std::string::npos);
  CHECK(cudnn_ex_unavailable(at::kFloat).find("fp16 activations only") != std::string::npos);
}

TEST_CASE("batch_norm_sites: every batch-norm call of a forward, its fusion and shape at the batch, the model left as it was") {
  at::manual_seed(11);
  resnet model = make_resnet("resnet18", 10);
  model->train();
  const std::shared_ptr<batch_norm_ops> ops = reference_batch_norm_ops(true, true, true);
  model->set_batch_norm_ops(ops);
  std::vector<at::Tensor> before;
  for (const auto& b : model->buffers()) before.push_back(b.clone());

  const std::vector<batch_norm_site> sites = batch_norm_sites(model, {8, 3, 64, 64});

  // The stem, then per basic block "bn, ReLU" and "bn, add, ReLU", and three downsample branches.
  REQUIRE(sites.size() == 20);
  int counts[3] = {0, 0, 0};
  for (const auto& s : sites) {
    ++counts[static_cast<int>(s.kind)];
    REQUIRE(s.bn != nullptr);
    REQUIRE(s.shape.size() == 4);
    CHECK(s.shape[0] == 8);
    CHECK(s.shape[1] == s.bn->options.num_features());
  }
  CHECK(counts[static_cast<int>(batch_norm_kind::bn_relu)] == 9);
  CHECK(counts[static_cast<int>(batch_norm_kind::bn_add_relu)] == 8);
  CHECK(counts[static_cast<int>(batch_norm_kind::plain)] == 3);
  CHECK(sites.front().kind == batch_norm_kind::bn_relu);
  CHECK(sites.front().shape == std::vector<std::int64_t>{8, 64, 32, 32});  // the stem, before the max pool
  CHECK(sites.back().kind == batch_norm_kind::bn_add_relu);
  CHECK(sites.back().shape == std::vector<std::int64_t>{8, 512, 2, 2});
  // The downsample branch's batch norm sees its block's output shape.
  for (std::size_t i = 0; i < sites.size(); ++i)
    if (sites[i].kind == batch_norm_kind::plain) {
      REQUIRE(i > 0);
      CHECK(sites[i].shape == sites[i - 1].shape);
    }

  // Left as it was: training mode, the same ops, statistics untouched.
  CHECK(model->is_training());
  CHECK(model->batch_norm_ops_in_use() == ops);
  const auto after = model->buffers();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(at::equal(after[i], before[i]));
}

TEST_CASE("fused batch norm: every cuDNN graph, forward and backward, passes the frontend's own checks without a GPU",
          "[model][fusion]") {
  struct form {
    bool relu, add, mask;
  };
  for (const at::ScalarType t : {at::kHalf, at::kBFloat16, at::kFloat}) {
    for (const form f : {form{false, false, false}, form{true, false, true}, form{true, false, false},
                         form{true, true, true}, form{true, true, false}}) {
      for (const std::vector<std::int64_t>& shape :
           {std::vector<std::int64_t>{4, 64, 8, 8}, std::vector<std::int64_t>{256, 2048, 7, 7}}) {
        CAPTURE(c10::toString(t), f.relu, f.add, f.mask, shape);
        const std::string why = cudnn_batch_norm_graph_check(t, f.relu, f.add, f.mask, shape);
        if (why.find("headers were not found") != std::string::npos || why.find("without CUDA") != std::string::npos) {
          WARN("not checked: " << why);
          return;
        }
        CHECK(why == "");
      }
    }
  }
}
