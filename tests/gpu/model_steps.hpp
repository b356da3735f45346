#pragma once
// For the [gpu] tests that hold a fused model's training against another model's on the GPU (the
// fused batch norm's, the convolution fusions'): twin models, batches, and the two comparisons,
// eager against eager and the CUDA graph step against the eager step.
#include <ATen/ATen.h>

#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "model_twins.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/train_step.hpp"

namespace tbgpu {

inline const c10::Device gpu_device(c10::kCUDA, 0);

using tbtest::relative;

inline bool finite_grads(const trainbench::resnet& m) {
  for (const auto& p : m->parameters())
    if (!at::isfinite(p.grad()).all().item<bool>()) return false;
  return true;
}

// Two copies of an architecture on the GPU in channels_last with the same weights and statistics.
inline std::pair<trainbench::resnet, trainbench::resnet> twins(const std::string& arch) {
  at::manual_seed(0);
  trainbench::resnet a = trainbench::make_resnet(arch, 10), b = trainbench::make_resnet(arch, 10);
  tbtest::copy_model_state(a, b);
  for (trainbench::resnet* m : {&a, &b}) {
    (*m)->to(gpu_device);
    (*m)->train();
    trainbench::weights_to_channels_last(**m);
  }
  return {a, b};
}

inline trainbench::device_batch batch(int i, std::int64_t n, std::int64_t size) {
  at::manual_seed(3000 + i);
  return {at::randn({n, 3, size, size}).cuda().contiguous(at::MemoryFormat::ChannelsLast),
          at::randint(10, {n}, at::kLong).cuda(), i, n};
}

// Six eager steps of both models on the same batches (n images of size px), fp16 with loss
// scaling (unscaled, ResNet-50's early activation gradients fall to fp16's subnormals, where two
// roundings part by more than fp16's epsilon) or bf16. The first step whose gradients are finite on
// both sides, at one scale, has each gradient within 5% (fp16) or 10% (bf16) in norm: both sides
// in half precision, rounded in different places. Then the losses within 2% (5%), the running
// statistics likewise, the batch counters equal, and as many fp16 steps skipped.
inline void check_trains_alike(trainbench::resnet& fused, trainbench::resnet& plain, trainbench::amp_mode amp,
                               std::int64_t n = 32, std::int64_t size = 64) {
  using namespace trainbench;
  const bool fp16 = amp == amp_mode::fp16;
  step_options so;
  so.device = gpu_device;
  so.amp = amp;
  so.scaler = fp16;
  so.optimizer.lr = 0.01;
  so.optimizer.momentum = 0.9;
  auto sf = make_eager_step(fused, so), sp = make_eager_step(plain, so);
  std::vector<double> lf, lp;
  bool grads_checked = false;
  for (int i = 0; i < 6; ++i) {
    const device_batch b = batch(i, n, size);
    sf->forward(b);
    sp->forward(b);
    sf->backward();
    sp->backward();
    if (!grads_checked && finite_grads(fused) && finite_grads(plain) &&
        (!fp16 || at::equal(sf->loss_scale(), sp->loss_scale()))) {
      const auto gf = fused->named_parameters(), gp = plain->named_parameters();
      for (const auto& item : gf) {
        INFO(item.key());
        CHECK(relative(item.value().grad(), gp[item.key()].grad()) < (fp16 ? 0.05 : 0.10));
      }
      grads_checked = true;
    }
    sf->optimizer_step();
    sp->optimizer_step();
    lf.push_back(sf->last_loss().item<double>());
    lp.push_back(sp->last_loss().item<double>());
  }
  CHECK(grads_checked);
  if (fp16) CHECK(sf->skipped_steps().item<double>() == sp->skipped_steps().item<double>());
  for (std::size_t i = 0; i < lf.size(); ++i) {
    INFO("step " << i << ": fused " << lf[i] << ", unfused " << lp[i]);
    CHECK(lf[i] == Approx(lp[i]).epsilon(fp16 ? 0.02 : 0.05));
  }
  tbtest::check_buffers_close(fused, plain, fp16 ? 0.02 : 0.05);
}

// Four fp16 steps (no loss scaling) of the CUDA graph step of `graphed` against the eager step of
// `eager`, two models fused alike, on batches of n images of size px: each loss within 1%, the
// parameters and running statistics after them within 1% in norm, the batch counters equal (what a
// capture that dropped or repeated an update would break).
inline void check_graph_trains_like_eager(trainbench::resnet& graphed, trainbench::resnet& eager, std::int64_t n,
                                          std::int64_t size) {
  using namespace trainbench;
  step_options so;
  so.device = gpu_device;
  so.amp = amp_mode::fp16;
  so.scaler = false;
  so.optimizer.lr = 0.01;
  so.optimizer.momentum = 0.9;
  so.optimizer.foreach = true;
  auto gs = make_graph_step(graphed, so, {n, 3, size, size}, true);
  auto es = make_eager_step(eager, so);
  gs->prepare();
  for (int i = 0; i < 4; ++i) {
    const device_batch b = batch(i, n, size);
    gs->forward(b);
    gs->backward();
    gs->optimizer_step();
    es->forward(b);
    es->backward();
    es->optimizer_step();
    const double lg = gs->last_loss().item<double>(), le = es->last_loss().item<double>();
    INFO("step " << i << ": graph " << lg << ", eager " << le);
    CHECK(lg == Approx(le).epsilon(0.01));
  }
  const auto pg = graphed->named_parameters(), pe = eager->named_parameters();
  for (const auto& item : pg) {
    INFO(item.key());
    CHECK(relative(item.value(), pe[item.key()]) < 1e-2);
  }
  tbtest::check_buffers_close(graphed, eager, 1e-2);
}

}  // namespace tbgpu
