#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/optim/sgd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/amp.hpp"
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

// A ResNet-18 eager step in fp16 with the grad scaler, seeded.
std::unique_ptr<train_step> fp16_eager_step(resnet& model) {
  at::manual_seed(0);
  model = make_resnet("resnet18", 10);
  step_options o;
  o.amp = amp_mode::fp16;
  o.scaler = true;
  return make_eager_step(model, o);
}
}  // namespace

TEST_CASE("loss halves within a few steps on a fixed batch: fp32, bf16, fp16 with the scaler") {
  // The loss falls below half within 3 steps (fp16: after the scaler's first skipped steps);
  // more steps only drive a fixed batch towards a loss of 0, where reduced precision degenerates:
  // with 8 steps (loss 0.002) bf16 reached NaN when the whole suite ran in one process. fp16 is
  // emulated on most CPUs (10x slower).
  const std::vector<std::tuple<amp_mode, bool, int>> cases{
      {amp_mode::off, false, 4}, {amp_mode::bf16, false, 4}, {amp_mode::fp16, true, 6}};
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
  resnet model{nullptr};
  auto step = fp16_eager_step(model);
  auto batch = fixed_batch(2, 16, 5);
  step->forward(batch);
  step->backward();
  model->parameters()[0].mutable_grad().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  const auto before = clones(model->parameters());
  step->optimizer_step();
  CHECK(step->skipped_steps().item<double>() == 1.0);
  CHECK(step->loss_scale().item<double>() == 32768.0);
  // The input and the loss were finite: the gradients alone overflowed.
  CHECK(at::equal(step->scaler()->skip_causes(), at::tensor({0.0f, 0.0f, 1.0f})));
  const auto after = model->parameters();
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(at::equal(before[i], after[i]));
}

// results.amp.skipped_by_cause: a step is skipped for its input (a batch with inf/nan), else its
// forward pass (an inf/nan loss), else its backward pass (the scaled gradients alone); each skip
// counts once, under its first cause, and a clean step counts nowhere.
TEST_CASE("the grad scaler tells why each step was skipped: input, forward or backward") {
  grad_scaler scaler(at::kCPU);
  auto p = at::ones({3}).requires_grad_(true);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor finite_loss = at::tensor(2.5f), clean = at::tensor({-3.5f, 1.0f, 2.0f});
  auto step = [&](const at::Tensor& loss, const at::Tensor& images, float grad) {
    scaler.see(loss, images);
    p.mutable_grad() = at::full({3}, grad);
    scaler.unscale({p.grad()});
    scaler.update();
  };
  step(finite_loss, clean, 1.0f);  // clean: nothing counted
  CHECK(at::equal(scaler.skip_causes(), at::zeros({3})));
  CHECK(scaler.input_abs_max().item<float>() == 3.5f);
  step(finite_loss, clean, inf);                              // backward
  step(at::tensor(inf), clean, nan);                          // forward
  step(at::tensor(nan), at::tensor({1.0f, nan, 0.0f}), nan);  // input (the loss is nan too)
  CHECK(at::equal(scaler.skip_causes(), at::tensor({1.0f, 1.0f, 1.0f})));
  CHECK(scaler.skipped_steps().item<float>() == 3.0f);
  CHECK(std::isnan(scaler.input_abs_max().item<float>()));  // once a batch held nan, the maximum says so
  // What see() keeps is per step: a clean step after them counts nowhere, then backward again.
  step(finite_loss, clean, 1.0f);
  step(finite_loss, clean, inf);
  CHECK(at::equal(scaler.skip_causes(), at::tensor({1.0f, 1.0f, 2.0f})));
}

TEST_CASE("an fp16 step on a batch holding nan is skipped for its input") {
  resnet model{nullptr};
  auto step = fp16_eager_step(model);
  auto batch = fixed_batch(2, 16, 5);
  batch.images[1][2][3][4] = std::numeric_limits<float>::quiet_NaN();
  step->forward(batch);
  step->backward();
  step->optimizer_step();
  CHECK(step->skipped_steps().item<double>() == 1.0);
  CHECK(at::equal(step->scaler()->skip_causes(), at::tensor({1.0f, 0.0f, 0.0f})));
}

namespace {
// Bit patterns, not values: a skipped step must leave every bit where it was.
bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && at::equal(a.contiguous().view(at::kInt), b.contiguous().view(at::kInt));
}

std::vector<at::Tensor> random_params(std::uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> p;
  for (auto shape : {std::vector<std::int64_t>{4, 3}, {7}, {2, 2, 3, 3}})
    p.push_back(at::randn(shape).requires_grad_(true));
  return p;
}

void set_scaled_grads(std::vector<at::Tensor>& params, const grad_scaler& scaler, int step) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    at::manual_seed(500 + step * 10 + static_cast<int>(i));
    params[i].mutable_grad() = at::randn_like(params[i]) * scaler.scale_tensor();
  }
}
}  // namespace

TEST_CASE("an applied step with a keep factor of 1 is bit-identical to torch::optim::SGD") {
  // Loss scaling passes keep = 1 on every clean step: those steps must round as PyTorch's
  // buf.mul_(m).add_(d) and p.add_(buf, -lr) do, not merely come close.
  for (bool foreach : {false, true}) {
    INFO((foreach ? "foreach" : "per-parameter"));
    optimizer_config cfg;
    cfg.lr = 0.1;
    cfg.momentum = 0.9;
    cfg.weight_decay = 0.01;
    cfg.foreach = foreach;
    auto ours = random_params(11), theirs = random_params(11);
    sgd opt(ours, cfg);
    torch::optim::SGD ref(theirs,
                          torch::optim::SGDOptions(cfg.lr).momentum(cfg.momentum).weight_decay(cfg.weight_decay));
    const at::Tensor keep = at::ones({});
    for (int step = 0; step < 6; ++step) {
      for (auto* set : {&ours, &theirs}) {
        for (std::size_t i = 0; i < set->size(); ++i) {
          at::manual_seed(700 + step * 10 + static_cast<int>(i));
          (*set)[i].mutable_grad() = at::randn_like((*set)[i]);
        }
      }
      opt.step(keep);
      ref.step();
      for (std::size_t i = 0; i < ours.size(); ++i) {
        INFO("step " << step << ", parameter " << i);
        const auto& state =
            static_cast<const torch::optim::SGDParamState&>(*ref.state().at(theirs[i].unsafeGetTensorImpl()));
        CHECK(same_bits(ours[i].detach(), theirs[i].detach()));
        CHECK(same_bits(opt.momentum_buffers()[i], state.momentum_buffer()));
      }
    }
  }
}

TEST_CASE("fp16 with foreach SGD steps: the scaler's keep factor is a 0-dim tensor") {
  grad_scaler scaler(at::kCPU);
  auto p = random_params(7);
  optimizer_config cfg;
  cfg.lr = 0.1;
  cfg.momentum = 0.9;
  cfg.foreach = true;
  sgd opt(p, cfg);
  set_scaled_grads(p, scaler, 0);
  const auto before = clones(p);
  const at::Tensor& keep = scaler.unscale(opt.grads());
  CHECK(keep.dim() == 0);
  REQUIRE_NOTHROW(opt.step(keep));
  scaler.update();
  for (std::size_t i = 0; i < p.size(); ++i) CHECK_FALSE(at::equal(p[i].detach(), before[i]));

  // The same through the eager step, as `run --set train.amp=fp16 --set train.optimizer.foreach=true` does:
  // the first step threw. One step is enough (fp16 is emulated on CPUs, and slow): the keep factor
  // reaches the foreach ops whether or not that step overflows at the initial scale.
  at::manual_seed(0);
  resnet model = make_resnet("resnet18", 10);
  step_options o;
  o.amp = amp_mode::fp16;
  o.scaler = true;
  o.optimizer.foreach = true;
  o.optimizer.momentum = 0.9;
  auto step = make_eager_step(model, o);
  const auto batch = fixed_batch(2, 8, 6);
  step->forward(batch);
  step->backward();
  REQUIRE_NOTHROW(step->optimizer_step());
  CHECK(step->skipped_steps().item<double>() <= 1.0);
}

TEST_CASE("an inf after clean steps skips the whole SGD step: parameters and momentum bit-identical") {
  for (bool foreach : {false, true}) {
    INFO((foreach ? "foreach" : "per-parameter"));
    scaler_options so;
    grad_scaler scaler(at::kCPU, so);
    auto p = random_params(8);
    optimizer_config cfg;
    cfg.lr = 0.1;
    cfg.momentum = 0.9;
    cfg.weight_decay = 0.01;
    cfg.foreach = foreach;
    sgd opt(p, cfg);
    for (int step = 0; step < 3; ++step) {  // clean steps: the momentum buffers fill up
      set_scaled_grads(p, scaler, step);
      opt.step(scaler.unscale(opt.grads()));
      scaler.update();
    }
    for (const auto& b : opt.momentum_buffers()) REQUIRE(b.abs().sum().item<double>() > 0);
    const auto params_before = clones(p), buffers_before = clones(opt.momentum_buffers());

    set_scaled_grads(p, scaler, 3);
    p[1].mutable_grad().view(-1)[2] = std::numeric_limits<float>::infinity();
    opt.step(scaler.unscale(opt.grads()));
    scaler.update();
    CHECK(scaler.skipped_steps().item<float>() == 1.0f);
    for (std::size_t i = 0; i < p.size(); ++i) {
      CHECK(same_bits(p[i].detach(), params_before[i]));
      CHECK(same_bits(opt.momentum_buffers()[i], buffers_before[i]));
    }

    // The next clean step applies again.
    set_scaled_grads(p, scaler, 4);
    opt.step(scaler.unscale(opt.grads()));
    scaler.update();
    for (std::size_t i = 0; i < p.size(); ++i) CHECK_FALSE(at::equal(p[i].detach(), params_before[i]));
  }
}

TEST_CASE("a skipped scaled step after clean ones leaves the model untouched, per-parameter and foreach") {
  // Loss scaling on fp32 (the step allows it; profiles tie it to fp16): every step before the
  // injected inf is clean, so the momentum buffers are full when the skip comes, and no step pays
  // for fp16 emulation on a CPU. The skip path (keep factor, nan_to_num, masked update) is the
  // same as with autocast fp16.
  for (bool foreach : {false, true}) {
    INFO((foreach ? "foreach" : "per-parameter"));
    at::manual_seed(0);
    resnet model = make_resnet("resnet18", 10);
    step_options o;
    o.scaler = true;
    o.optimizer.momentum = 0.9;
    o.optimizer.foreach = foreach;
    auto step = make_eager_step(model, o);
    const auto batch = fixed_batch(2, 8, 9);
    for (int i = 0; i < 3; ++i) {
      step->forward(batch);
      step->backward();
      step->optimizer_step();
    }
    REQUIRE(step->skipped_steps().item<double>() == 0.0);
    step->forward(batch);
    step->backward();
    model->parameters()[5].mutable_grad().view(-1)[0] = std::numeric_limits<float>::infinity();
    const auto before = clones(model->parameters());
    step->optimizer_step();
    CHECK(step->skipped_steps().item<double>() == 1.0);
    const auto after = model->parameters();
    for (std::size_t i = 0; i < before.size(); ++i) CHECK(same_bits(before[i], after[i].detach()));
  }
}

TEST_CASE("a parameter without a gradient does not stop the others from stepping") {
  for (bool foreach : {false, true}) {
    INFO((foreach ? "foreach" : "per-parameter"));
    auto p = random_params(10);
    optimizer_config cfg;
    cfg.lr = 0.1;
    cfg.momentum = 0.9;
    cfg.foreach = foreach;
    sgd opt(p, cfg);
    const auto before = clones(p);
    p[0].mutable_grad() = at::ones_like(p[0]);
    p[2].mutable_grad() = at::ones_like(p[2]);
    opt.step();
    CHECK(at::allclose(p[0].detach(), before[0] - 0.1));
    CHECK(at::equal(p[1].detach(), before[1]));  // no gradient: left alone, as torch.optim.SGD does
    CHECK(at::allclose(p[2].detach(), before[2] - 0.1));
    CHECK(at::equal(opt.momentum_buffers()[1], at::zeros_like(before[1])));

    // With loss scaling too: only the defined gradients are unscaled.
    grad_scaler scaler(at::kCPU);
    p[0].mutable_grad() = at::ones_like(p[0]) * scaler.scale_tensor();
    p[2].mutable_grad().reset();
    REQUIRE(opt.grads().size() == 1);
    const auto mid = clones(p);
    REQUIRE_NOTHROW(opt.step(scaler.unscale(opt.grads())));
    CHECK_FALSE(at::equal(p[0].detach(), mid[0]));
    CHECK(at::equal(p[1].detach(), mid[1]));
    CHECK(at::equal(p[2].detach(), mid[2]));
  }
}

TEST_CASE("autocast scopes restore the previous dtype and cache setting, also on unwind") {
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  {
    autocast_scope amp(at::kCPU, at::kHalf, true);
    CHECK(at::autocast::get_autocast_dtype(at::kCPU) == at::kHalf);
    CHECK(at::autocast::is_autocast_enabled(at::kCPU));
  }
  CHECK(at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16);
  CHECK_FALSE(at::autocast::is_autocast_enabled(at::kCPU));

  REQUIRE(at::autocast::is_autocast_cache_enabled());
  try {
    autocast_cache_off no_cache;
    CHECK_FALSE(at::autocast::is_autocast_cache_enabled());
    throw std::runtime_error("a capture that fails");
  } catch (const std::runtime_error&) {
  }
  CHECK(at::autocast::is_autocast_cache_enabled());
}
