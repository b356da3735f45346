// backend.conv_fusion on the CPU: the fused "batch norm, ReLU, convolution" op run on the reference
// kernels inside ResNet-18 and ResNet-50 against the unfused model (the autograd seam, the
// statistics handed from one fused convolution to the next batch norm, the running statistics),
// the calls that fall back to the unfused ops, and fuse_convolutions' reasons where no GPU is
// reached. The cuDNN kernels are held to the same models on a GPU (tests/gpu/test_conv_fusion_gpu.cpp).
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "model_twins.hpp"
#include "trainbench/model/conv_fusion.hpp"
#include "trainbench/model/conv_fusion_op.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/model/resnet.hpp"

using namespace trainbench;

namespace {

using tbtest::relative;

// The reference kernels, counting which of them ran; `skew` scales dgamma, a planted error.
struct counting_kernels final : conv_fusion_kernels {
  std::shared_ptr<conv_fusion_kernels> ref = reference_conv_fusion_kernels();
  int finalized = 0, from_x = 0, forwards = 0, backwards = 0;
  double skew = 1.0;
  bn_finalized finalize(const at::Tensor& sum, const at::Tensor& sq_sum, std::int64_t count, const at::Tensor& gamma,
                        const at::Tensor& beta, double eps) override {
    ++finalized;
    return ref->finalize(sum, sq_sum, count, gamma, beta, eps);
  }
  bn_finalized statistics(const at::Tensor& x, const at::Tensor& gamma, const at::Tensor& beta, double eps) override {
    ++from_x;
    return ref->statistics(x, gamma, beta, eps);
  }
  conv_genstats forward(const at::Tensor& x, const bn_finalized& f, const at::Tensor& w, conv_geometry g) override {
    ++forwards;
    return ref->forward(x, f, w, g);
  }
  conv_fusion_gradients backward(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& x, const bn_finalized& f,
                                 const at::Tensor& gamma, const at::Tensor& beta, conv_geometry g) override {
    ++backwards;
    conv_fusion_gradients d = ref->backward(dy, w, x, f, gamma, beta, g);
    d.dgamma = d.dgamma * skew;
    return d;
  }
};

std::pair<resnet, resnet> twins(const std::string& arch, at::ScalarType dtype = at::kDouble) {
  at::manual_seed(7);
  resnet fused = make_resnet(arch, 10), plain = make_resnet(arch, 10);
  fused->to(dtype);
  plain->to(dtype);
  tbtest::copy_model_state(fused, plain);
  return {fused, plain};
}

// Every pair of the model on `kernels`, for any shape.
std::size_t plan_all(resnet& m, const std::shared_ptr<conv_fusion_kernels>& kernels) {
  conv_fusion_plans plans;
  for (const conv_fusion_site& s : conv_fusion_sites(m, {4, 3, 32, 32})) plans[s.conv] = {kernels, {}, at::kDouble};
  const std::size_t n = plans.size();
  m->set_batch_norm_ops(conv_fusion_ops(m->batch_norm_ops_in_use(), std::move(plans)));
  return n;
}

// The worst relative difference over the output, every parameter's gradient and every floating
// buffer after one training step of both models on the same batch; the batch counters must agree.
double one_step_difference(resnet& fused, resnet& plain) {
  fused->train();
  plain->train();
  at::manual_seed(3);
  const at::Tensor x = at::randn({4, 3, 32, 32}, at::kDouble);
  const at::Tensor labels = at::randint(10, {4}, at::kLong);
  const at::Tensor of = fused->forward(x), op = plain->forward(x);
  double worst = relative(of, op);
  at::cross_entropy_loss(of, labels).backward();
  at::cross_entropy_loss(op, labels).backward();
  const auto pf = fused->named_parameters(), pp = plain->named_parameters();
  for (const auto& item : pf) worst = std::max(worst, relative(item.value().grad(), pp[item.key()].grad()));
  const auto bf = fused->named_buffers(), bp = plain->named_buffers();
  for (const auto& item : bf) {
    INFO(item.key());
    if (item.value().is_floating_point())
      worst = std::max(worst, relative(item.value(), bp[item.key()]));
    else
      CHECK(at::equal(item.value(), bp[item.key()]));  // num_batches_tracked
  }
  return worst;
}

}  // namespace

TEST_CASE(
    "backend.conv_fusion: ResNet-18 and ResNet-50 on the fused op's reference kernels train like the unfused "
    "model, with and without the fused batch norm around it",
    "[model][conv_fusion]") {
  struct expect {
    const char* arch;
    int pairs, from_x, finalized;  // ResNet-50: each bn2 -> conv3 takes conv2's fused statistics
  };
  for (const expect e : {expect{"resnet18", 8, 8, 0}, expect{"resnet50", 32, 16, 16}}) {
    for (const bool bn_fused : {false, true}) {
      INFO(e.arch << (bn_fused ? ", batch norms fused too" : ""));
      auto [fused, plain] = twins(e.arch);
      if (bn_fused) {
        fusion_request r;
        r.cpu_reference = true;
        REQUIRE(fuse_batch_norm(fused, r).applied.size() == 3);
      }
      auto kernels = std::make_shared<counting_kernels>();
      REQUIRE(plan_all(fused, kernels) == static_cast<std::size_t>(e.pairs));
      CHECK(one_step_difference(fused, plain) < 1e-9);
      CHECK(kernels->forwards == e.pairs);
      CHECK(kernels->backwards == e.pairs);
      CHECK(kernels->from_x == e.from_x);
      CHECK(kernels->finalized == e.finalized);
    }
  }
}

TEST_CASE("backend.conv_fusion: a wrong batch-norm weight gradient in the fused op shows against the unfused model",
          "[model][conv_fusion]") {
  auto [fused, plain] = twins("resnet18");
  auto kernels = std::make_shared<counting_kernels>();
  kernels->skew = 1.01;
  plan_all(fused, kernels);
  CHECK(one_step_difference(fused, plain) > 1e-3);
}

TEST_CASE("backend.conv_fusion: eval mode, another batch, dtype, layout or eps than planned run the unfused ops",
          "[model][conv_fusion]") {
  auto [fused, plain] = twins("resnet18", at::kFloat);  // a sized plan takes float scale and shift
  auto kernels = std::make_shared<counting_kernels>();
  conv_fusion_plans plans;
  // 64 px: at 32, layer4's 1 x 1 activations are NHWC and NCHW at once.
  for (const conv_fusion_site& s : conv_fusion_sites(fused, {4, 3, 64, 64}))
    plans[s.conv] = {kernels, s.input, at::kFloat, s.bn->options.eps()};
  fused->set_batch_norm_ops(conv_fusion_ops(fused->batch_norm_ops_in_use(), std::move(plans)));
  const at::Tensor x = at::randn({4, 3, 64, 64});
  fused->eval();
  plain->eval();
  CHECK(at::equal(fused->forward(x), plain->forward(x)));
  fused->train();
  plain->train();
  fused->forward(x.narrow(0, 0, 2));  // another batch
  fused->forward(x);                  // NCHW: the sized plan wants NHWC
  CHECK(kernels->forwards == 0);
  fused->to(at::kDouble);  // the plan's dtype no longer
  fused->forward(x.to(at::kDouble).contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(kernels->forwards == 0);
  fused->to(at::kFloat);
  fused->forward(x.contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(kernels->forwards == 8);
  // A batch norm whose eps is not the one planned runs unfused; the others still run fused.
  conv_fusion_sites(fused, {4, 3, 64, 64}).front().bn->options.eps(1e-3);
  fused->forward(x.contiguous(at::MemoryFormat::ChannelsLast));
  CHECK(kernels->forwards == 8 + 7);
}

TEST_CASE(
    "fuse_convolutions: the CPU keeps the unfused ops unless asked for the reference, and on a GPU NCHW and "
    "float64 are refused with the reason before any GPU work",
    "[model][conv_fusion]") {
  resnet m = make_resnet("resnet18", 10);
  fusion_request r;
  r.input_shape = {4, 3, 32, 32};
  fusion_outcome o = fuse_convolutions(m, r);
  CHECK(o.applied.empty());
  CHECK(o.ineffective == std::vector<std::string>{"batch norm + ReLU + convolution: no fused kernel on the CPU; the "
                                                  "unfused ops run"});
  r.cpu_reference = true;
  o = fuse_convolutions(m, r);
  CHECK(o.ineffective.empty());
  CHECK(o.applied == std::vector<std::string>{"batch norm + ReLU + convolution (CPU reference ops, 8 pairs)"});

  resnet g = make_resnet("resnet50", 10);
  r = fusion_request();
  r.device = c10::Device(c10::kCUDA, 0);
  r.amp = amp_mode::fp16;
  r.input_shape = {4, 3, 32, 32};
  o = fuse_convolutions(g, r);
  REQUIRE(o.ineffective.size() == 1);
  CHECK(o.ineffective[0] ==
        "batch norm + ReLU + convolution: cuDNN's convolution fusions run NHWC only (this run "
        "is NCHW: set model.channels_last)");
  g->to(at::kDouble);
  r.channels_last = true;
  r.amp = amp_mode::off;
  o = fuse_convolutions(g, r);
  REQUIRE(o.ineffective.size() == 1);
  CHECK(o.ineffective[0] == "batch norm + ReLU + convolution: no cuDNN fusion in fp64");
}

TEST_CASE(
    "fuse_convolutions: a CUDA request on a host without a GPU names every shape it could not build and keeps "
    "the unfused ops",
    "[model][conv_fusion]") {
  if (torch::cuda::is_available()) {
    SUCCEED("this host has a GPU: the [gpu] tests of the convolution fusions cover it");
    return;
  }
  auto [m, plain] = twins("resnet18", at::kFloat);
  fusion_request r;
  r.device = c10::Device(c10::kCUDA, 0);
  r.amp = amp_mode::fp16;
  r.channels_last = true;
  r.input_shape = {4, 3, 32, 32};
  const fusion_outcome o = fuse_convolutions(m, r);
  CHECK(o.applied.empty());
  REQUIRE(o.ineffective.size() == 1);
  INFO(o.ineffective[0]);
  // ResNet-18's four shapes, the first (largest work) named with its pairs and why.
  CHECK(o.ineffective[0].rfind("batch norm + ReLU + convolution: no shape of this model and batch runs fused (4x", 0) ==
        0);
  CHECK(o.ineffective[0].find(" pairs): ") != std::string::npos);
  m->eval();
  plain->eval();
  const at::Tensor x = at::randn({2, 3, 32, 32});
  CHECK(at::equal(m->forward(x), plain->forward(x)));
}
