#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/optim/sgd.h>

#include <catch2/catch.hpp>

#include "trainbench/stages/grad_scaler.hpp"
#include "trainbench/stages/optimizer.hpp"
#include "trainbench/stages/train_step.hpp"

using namespace trainbench;

namespace {
device_batch fixed_batch(std::int64_t n, std::int64_t size, std::uint64_t seed) {
  at::manual_seed(seed);
  return {at::randn({n, 3, size, size}), at::randint(10, {n}, at::kLong), 0, n};
}

double run_steps(amp_mode amp, bool scaler, int steps, double& first) {
  at::manual_seed(0);
  resnet model = make_resnet("resnet18", 10);
  step_options o;
  o.amp = amp;
  o.scaler = scaler;
  o.optimizer.lr = 0.01;
  auto step = make_eager_step(model, o);
  // 8 images of 16 x 16: batch norm still sees 8 values per channel once the side is 1 x 1. With
  // 4 images of 8 x 8 (4 values from layer3 on), bf16 training went to NaN within 20 steps on a
  // CPU with native bf16 (AMX); PyTorch's own loop degenerates there too (gradients of 1e27).
  const auto batch = fixed_batch(8, 16, 1);
  double last = 0;
  for (int i = 0; i < steps; ++i) {
    step->forward(batch);
    step->backward();
    step->optimizer_step();
    last = step->last_loss().item<double>();
    if (i == 0) first = last;
  }
  return last;
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone());
  return out;
}
}  // namespace

TEST_CASE("loss halves within a few steps on a fixed batch: fp32, bf16, fp16 with the scaler") {
  // The loss halves within 3 or 4 steps in each mode; more steps only drive a fixed batch towards
  // a loss of 0, where reduced precision degenerates. fp16 is emulated on most CPUs (10x slower).
  const std::vector<std::tuple<amp_mode, bool, int>> cases{
      {amp_mode::off, false, 8}, {amp_mode::bf16, false, 8}, {amp_mode::fp16, true, 6}};
  for (auto [amp, scaler, steps] : cases) {
    INFO(to_string(amp));
    double first = 0;
    const double last = run_steps(amp, scaler, steps, first);
    CHECK(std::isfinite(last));
    CHECK(last < 0.5 * first);
  }
}

TEST_CASE("autocast really changes what runs, and only inside the forward") {
  at::manual_seed(0);
  resnet model = make_resnet("resnet18", 10);
  step_options o;
  o.amp = amp_mode::bf16;
  auto step = make_eager_step(model, o);
  const auto batch = fixed_batch(2, 16, 2);
  step->forward(batch);
  CHECK_FALSE(at::autocast::is_autocast_enabled(at::kCPU));  // scope left
  step->backward();
  // Weight grads stay fp32 (the parameters are fp32); the forward ran in bf16.
  CHECK(model->parameters()[0].grad().scalar_type() == at::kFloat);
  {
    at::autocast::set_autocast_enabled(at::kCPU, false);
    const auto x = model->forward(batch.images);
    CHECK(x.scalar_type() == at::kFloat);
  }
}

TEST_CASE("gradient accumulation k=4 at batch 8 matches batch 32") {
  const auto big = fixed_batch(32, 16, 3);
  auto train = [&](int k) {
    at::manual_seed(0);
    resnet model = make_resnet("resnet18", 10);
    model->eval();  // BatchNorm statistics per micro-batch would differ; compare the arithmetic
    step_options o;
    o.accumulation = k;
    o.optimizer.lr = 0.05;
    auto step = make_eager_step(model, o);
    const std::int64_t n = 32 / k;
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < k; ++i) {
        device_batch micro{big.images.narrow(0, i * n, n), big.labels.narrow(0, i * n, n), 0, n};
        step->forward(micro);
        step->backward();
        step->optimizer_step();
      }
    }
    return clones(model->parameters());
  };
  const auto one = train(1), four = train(4);
  for (std::size_t i = 0; i < one.size(); ++i) CHECK(at::allclose(one[i], four[i], 1e-4, 1e-6));
}

TEST_CASE("our SGD equals torch::optim::SGD, per-parameter and foreach") {
  at::manual_seed(4);
  std::vector<at::Tensor> start;
  for (auto shape : {std::vector<std::int64_t>{4, 3}, {7}, {2, 2, 3, 3}}) start.push_back(at::randn(shape));
  auto make = [&] {
    std::vector<at::Tensor> p;
    for (const auto& t : start) p.push_back(t.clone().requires_grad_(true));
    return p;
  };
  optimizer_config cfg;
  cfg.lr = 0.1;
  cfg.momentum = 0.9;
  cfg.weight_decay = 0.01;
  auto ref_params = make(), loop_params = make(), each_params = make();
  torch::optim::SGD ref(ref_params,
                        torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum).weight_decay(cfg.weight_decay));
  sgd loop(loop_params, cfg);
  cfg.foreach = true;
  sgd each(each_params, cfg);
  for (int step = 0; step < 5; ++step) {
    for (auto* set : {&ref_params, &loop_params, &each_params}) {
      for (std::size_t i = 0; i < set->size(); ++i) {
        at::manual_seed(100 + step * 10 + static_cast<int>(i));
        (*set)[i].mutable_grad() = at::randn_like((*set)[i]);
      }
    }
    ref.step();
    loop.step();
    each.step();
  }
  for (std::size_t i = 0; i < start.size(); ++i) {
    CHECK(at::allclose(loop_params[i], ref_params[i], 1e-5, 1e-6));
    CHECK(at::allclose(each_params[i], ref_params[i], 1e-5, 1e-6));
  }
}

TEST_CASE("grad scaler: an inf skips the step and backs off, then growth after the interval") {
  scaler_options so;
  so.growth_interval = 3;
  grad_scaler scaler(at::kCPU, so);
  auto p = at::ones({3}).requires_grad_(true);
  optimizer_config cfg;
  cfg.lr = 0.5;
  sgd opt({p}, cfg);

  // Step 1: an injected inf. Nothing moves, the scale halves, the skip is counted.
  p.mutable_grad() = at::tensor({1.0f, std::numeric_limits<float>::infinity(), 1.0f}) * 65536;
  opt.step(scaler.unscale(opt.grads()));
  scaler.update();
  CHECK(at::equal(p.detach(), at::ones({3})));
  CHECK(at::equal(opt.momentum_buffers()[0], at::zeros({3})));
  CHECK(scaler.scale_tensor().item<float>() == 32768.0f);
  CHECK(scaler.skipped_steps().item<float>() == 1.0f);

  // Three clean steps: applied (unscaled), then the scale doubles.
  for (int i = 0; i < 3; ++i) {
    p.mutable_grad() = at::full({3}, 1.0f) * scaler.scale_tensor();
    opt.step(scaler.unscale(opt.grads()));
    scaler.update();
  }
  CHECK(scaler.scale_tensor().item<float>() == 65536.0f);
  CHECK(scaler.skipped_steps().item<float>() == 1.0f);
  // Momentum 0.9 from zero with unit grads: bufs 1, 1.9, 2.71; p = 1 - 0.5 * 5.61.
  CHECK(p.detach()[0].item<float>() == Approx(1.0 - 0.5 * (1.0 + 1.9 + 2.71)));
}

TEST_CASE("the step counts skipped fp16 steps on the device") {
  at::manual_seed(0);
  resnet model = make_resnet("resnet18", 10);
  step_options o;
  o.amp = amp_mode::fp16;
  o.scaler = true;
  auto step = make_eager_step(model, o);
  auto batch = fixed_batch(2, 16, 5);
  step->forward(batch);
  step->backward();
  model->parameters()[0].mutable_grad().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  const auto before = clones(model->parameters());
  step->optimizer_step();
  CHECK(step->skipped_steps().item<double>() == 1.0);
  CHECK(step->loss_scale().item<double>() == 32768.0);
  const auto after = model->parameters();
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(at::equal(before[i], after[i]));
}
