// backend.compile on the CPU: the fused SGD against the eager SGD (torch.optim.SGD's update),
// with and without loss scaling; the switch's parts as a pipeline and a report show them; the
// compiled model trains as the eager one. The CUDA side is tests/gpu/test_gpu_compile.cpp.
#include <ATen/ATen.h>
#include <torch/optim/sgd.h>

#include <catch2/catch.hpp>
#include <limits>

#include "helpers.hpp"
#include "model_twins.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/pipeline.hpp"
#include "trainbench/stages/fused_sgd.hpp"
#include "trainbench/stages/grad_scaler.hpp"
#include "trainbench/stages/optimizer.hpp"
#include "trainbench/stages/train_step.hpp"

using namespace trainbench;

namespace {

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone());
  return out;
}

// Shapes of a convolution (channels_last, as under backend.compile), a batch norm and a linear layer.
std::vector<at::Tensor> start_params() {
  at::manual_seed(7);
  return {at::randn({8, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast), at::randn({8}), at::randn({10, 8}),
          at::randn({10})};
}

std::vector<at::Tensor> leaves(const std::vector<at::Tensor>& start) {
  std::vector<at::Tensor> p;
  for (const auto& t : start) p.push_back(t.clone(at::MemoryFormat::Preserve).requires_grad_(true));
  return p;
}

// The same gradients for every copy: seeded by step and parameter, in the parameter's layout.
void set_grads(std::vector<at::Tensor>& params, int step, double scale = 1.0) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    at::manual_seed(100 + step * 10 + static_cast<int>(i));
    params[i].mutable_grad() = (at::randn(params[i].sizes()) * scale).contiguous(params[i].suggest_memory_format());
  }
}

// Elementwise within rtol / atol. The fused kernel computes lr * (momentum * buf + grad) with fused
// multiply-adds (vectorised on the CPU), where the eager ops round after each multiply and add:
// about one float32 ulp per step apart, which after 5 steps stays below 1e-6 relative.
constexpr double sgd_rtol = 1e-6, sgd_atol = 1e-7;

}  // namespace

TEST_CASE(
    "fused SGD (at::_fused_sgd_) equals the eager SGD and torch::optim::SGD after 5 steps: parameters and momentum") {
  struct config {
    double lr, momentum, weight_decay;
  };
  // The ladder's SGD (lr 0.001, momentum 0.9, no weight decay), then with weight decay, then plain SGD.
  for (const auto c : {config{0.001, 0.9, 0.0}, config{0.1, 0.9, 0.01}, config{0.05, 0.0, 1e-4}}) {
    INFO("lr " << c.lr << " momentum " << c.momentum << " weight_decay " << c.weight_decay);
    optimizer_config cfg;
    cfg.lr = c.lr;
    cfg.momentum = c.momentum;
    cfg.weight_decay = c.weight_decay;
    const auto start = start_params();
    auto ref_p = leaves(start), eager_p = leaves(start), fused_p = leaves(start);
    torch::optim::SGD ref(ref_p, torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
    sgd eager(eager_p, cfg);
    fused_sgd fused(fused_p, cfg);
    for (int step = 0; step < 5; ++step) {
      for (auto* set : {&ref_p, &eager_p, &fused_p}) set_grads(*set, step);
      ref.step();
      eager.step();
      fused.step();
    }
    REQUIRE(fused.momentum_buffers().size() == (c.momentum != 0 ? start.size() : 0));
    for (std::size_t i = 0; i < start.size(); ++i) {
      INFO("parameter " << i);
      CHECK(at::allclose(fused_p[i], eager_p[i], sgd_rtol, sgd_atol));
      CHECK(at::allclose(fused_p[i], ref_p[i], sgd_rtol, sgd_atol));
      CHECK(!at::equal(fused_p[i], start[i]));
      CHECK(fused_p[i].strides() == start[i].strides());  // channels_last stays channels_last
      if (c.momentum != 0)
        CHECK(at::allclose(fused.momentum_buffers()[i], eager.momentum_buffers()[i], sgd_rtol, sgd_atol));
    }
  }
}

TEST_CASE("fused SGD with a gradient of another layout than its parameter still steps correctly") {
  // The CPU kernel walks parameter and gradient as flat arrays: a contiguous gradient of a
  // channels_last parameter would be applied to the wrong elements if passed as it is.
  optimizer_config cfg;
  cfg.lr = 0.1;
  const auto start = start_params();
  auto eager_p = leaves(start), fused_p = leaves(start);
  sgd eager(eager_p, cfg);
  fused_sgd fused(fused_p, cfg);
  for (auto* set : {&eager_p, &fused_p}) {
    set_grads(*set, 0);
    (*set)[0].mutable_grad() = (*set)[0].grad().contiguous();  // NCHW gradient, NHWC parameter
  }
  eager.step();
  fused.step();
  for (std::size_t i = 0; i < start.size(); ++i) CHECK(at::allclose(fused_p[i], eager_p[i], sgd_rtol, sgd_atol));
}

TEST_CASE("fused SGD takes a 1x1 convolution's gradient whose strides differ only in size-1 dimensions as it is") {
  // channels_last [8, 4, 1, 1] has strides (4, 1, 4, 4), a contiguous one (4, 1, 1, 1): the same
  // memory order, so no copy per step (a 1x1 convolution's gradient often comes so).
  optimizer_config cfg;
  cfg.lr = 0.1;
  const at::Tensor start = at::randn({8, 4, 1, 1});
  const auto nhwc = [&] { return at::empty_strided({8, 4, 1, 1}, {4, 1, 4, 4}).copy_(start).set_requires_grad(true); };
  at::Tensor eager_w = nhwc(), fused_w = nhwc();
  REQUIRE(fused_w.strides() != start.strides());
  const at::Tensor grad = at::randn({8, 4, 1, 1});
  eager_w.mutable_grad() = grad.clone();
  fused_w.mutable_grad() = grad.clone();
  const void* given = fused_w.grad().data_ptr();
  sgd eager({eager_w}, cfg);
  fused_sgd fused({fused_w}, cfg);
  eager.step();
  fused.step();
  CHECK(fused_w.grad().data_ptr() == given);
  CHECK(at::allclose(fused_w, eager_w, sgd_rtol, sgd_atol));
}

TEST_CASE(
    "fused SGD under fp16 loss scaling: unscaled in the kernel as the eager path unscales, and an inf skips the step") {
  optimizer_config cfg;
  cfg.lr = 0.1;
  cfg.momentum = 0.9;
  cfg.weight_decay = 0.01;
  const auto start = start_params();
  auto eager_p = leaves(start), fused_p = leaves(start);
  auto eager = make_step_optimizer(eager_p, cfg, false);
  auto fused = make_step_optimizer(fused_p, cfg, true);
  grad_scaler eager_scaler(at::kCPU), fused_scaler(at::kCPU);
  const double scale = eager_scaler.scale_tensor().item<double>();
  for (int step = 0; step < 3; ++step) {
    set_grads(eager_p, step, scale);
    set_grads(fused_p, step, scale);
    eager->step_scaled(eager_scaler);
    fused->step_scaled(fused_scaler);
    eager_scaler.update();
    fused_scaler.update();
  }
  for (std::size_t i = 0; i < start.size(); ++i) {
    CHECK(at::allclose(fused_p[i], eager_p[i], sgd_rtol, sgd_atol));
    CHECK(at::allclose(fused->state()[i], eager->state()[i], sgd_rtol, sgd_atol));
    // The kernel writes the unscaled gradient back, as the eager unscale does in place.
    CHECK(at::allclose(fused_p[i].grad(), eager_p[i].grad(), 1e-6, 1e-7));
  }
  CHECK(fused_scaler.skipped_steps().item<double>() == 0);

  // An inf in one gradient: nothing moves (bit for bit), the scale backs off, the skip is counted.
  const auto params_before = clones(fused_p), buffers_before = clones(fused->state());
  set_grads(fused_p, 9, scale);
  fused_p[2].mutable_grad()[0][0] = std::numeric_limits<float>::infinity();
  fused->step_scaled(fused_scaler);
  fused_scaler.update();
  for (std::size_t i = 0; i < start.size(); ++i) {
    CHECK(at::equal(fused_p[i], params_before[i]));
    CHECK(at::equal(fused->state()[i], buffers_before[i]));
  }
  CHECK(fused_scaler.found_inf().item<double>() == 1);
  CHECK(fused_scaler.skipped_steps().item<double>() == 1);
  CHECK(fused_scaler.scale_tensor().item<double>() == scale / 2);

  // And the next clean step applies again.
  set_grads(fused_p, 10, scale / 2);
  fused->step_scaled(fused_scaler);
  fused_scaler.update();
  CHECK(!at::equal(fused_p[0], params_before[0]));
  CHECK(fused_scaler.skipped_steps().item<double>() == 1);
}

TEST_CASE(
    "the compiled model (NHWC, fused batch norm where built, fused SGD) trains as the eager model on the CPU, in float64") {
  // Two models with the same weights: eager NCHW with the per-parameter SGD, and what
  // backend.compile builds on a CPU: NHWC weights and input, fuse_batch_norm, the fused SGD.
  // float64, because in float32 PyTorch's own CPU kernels part in NHWC and NCHW within a few steps
  // of this batch-8 training (with neither fusion: loss 3.83715 vs 3.83742 at the fourth step, 64 px):
  // in float64 they agree to 1e-15, so what differs is ours. The device tests run float32.
  at::manual_seed(0);
  resnet eager_model = make_resnet("resnet18", 10), compiled_model = make_resnet("resnet18", 10);
  eager_model->to(at::kDouble);
  compiled_model->to(at::kDouble);
  tbtest::copy_model_state(eager_model, compiled_model);
  weights_to_channels_last(*compiled_model);
  fusion_request fr;
  fr.channels_last = true;
  fr.input_shape = {8, 3, 64, 64};  // at 16 px, layers 3 and 4 normalise 8 values a channel
  fr.cpu_reference = true;  // the fused ops' CPU reference: the seam and the arithmetic under test
  fuse_batch_norm(compiled_model, fr);
  step_options eager_o, compiled_o;
  eager_o.optimizer.lr = compiled_o.optimizer.lr = 0.01;
  compiled_o.fused_sgd = true;
  auto eager = make_eager_step(eager_model, eager_o);
  auto compiled = make_eager_step(compiled_model, compiled_o);
  CHECK_THAT(compiled->describe(), Catch::Contains("fused SGD"));
  for (int step = 0; step < 5; ++step) {
    at::manual_seed(500 + step);
    device_batch batch{at::randn({8, 3, 64, 64}, at::kDouble), at::randint(10, {8}, at::kLong), step, 8};
    device_batch nhwc = batch;
    nhwc.images = batch.images.contiguous(at::MemoryFormat::ChannelsLast);
    eager->forward(batch);
    compiled->forward(nhwc);
    eager->backward();
    compiled->backward();
    eager->optimizer_step();
    compiled->optimizer_step();
    // The fused kernel's multiply-adds round once where the eager ops round twice: 2e-15 measured.
    CHECK(compiled->last_loss().item<double>() == Approx(eager->last_loss().item<double>()).epsilon(1e-6));
  }
  const auto pe = eager_model->parameters(), pc = compiled_model->parameters();
  for (std::size_t i = 0; i < pe.size(); ++i) {
    INFO("parameter " << i);
    CHECK(at::allclose(pc[i], pe[i], 1e-6, 1e-7));  // measured: 1e-10 at most
  }
  const auto be = eager_model->buffers(), bc = compiled_model->buffers();  // running mean / var, batches tracked
  REQUIRE(be.size() == bc.size());
  for (std::size_t i = 0; i < be.size(); ++i)
    CHECK(at::allclose(bc[i].to(at::kDouble), be[i].to(at::kDouble), 1e-6, 1e-7));  // 2.4e-11
}

TEST_CASE("backend.compile on the CPU: NHWC and fused SGD run, the graph is a note, the fusions say what they did") {
  const auto dir = tbtest::scratch("compile-cpu");
  const auto file = tbtest::tiny_profile(dir, "backend: {compile: true}\n");
  const profile p = load_profile(file).value;
  effective_settings e;
  std::int64_t parameters = 0;
  pipeline built = build_pipeline(p, build_options{}, e, parameters);

  // What fuse_batch_norm does for the same request on a model of its own is what the run reports.
  resnet probe = make_resnet("resnet18", 10);
  fusion_request fr;
  fr.channels_last = true;
  fr.input_shape = {4, 3, 16, 16};
  const fusion_outcome fusions = fuse_batch_norm(probe, fr);
  std::vector<std::string> expected{"channels_last"};
  for (const auto& f : fusions.applied) expected.push_back(f);
  expected.push_back("fused_sgd");
  CHECK(e.compile == expected);
  std::vector<std::string> notes{
      "backend.compile: cuda_graph not run here: the device is cpu; a CUDA graph needs a CUDA device"};
  for (const auto& f : fusions.ineffective) notes.push_back("backend.compile: " + f);
  CHECK(e.notes == notes);
  CHECK(e.channels_last);
  CHECK_FALSE(e.cuda_graph);
  CHECK_THAT(e.step, Catch::Contains("fused SGD"));
  for (const auto& param : built.step->model()->parameters())
    if (param.dim() == 4) CHECK(param.is_contiguous(at::MemoryFormat::ChannelsLast));

  // Without the switch nothing of it runs, and nothing is said about it.
  effective_settings plain;
  const profile q = load_profile(file, {"backend.compile=false"}).value;
  pipeline eager = build_pipeline(q, build_options{}, plain, parameters);
  CHECK(plain.compile.empty());
  CHECK(plain.notes.empty());
  CHECK_FALSE(plain.channels_last);
  CHECK_THAT(plain.step, !Catch::Contains("fused"));
}

TEST_CASE("backend.compile asks what a graph asks of a profile") {
  const auto dir = tbtest::scratch("compile-profile");
  const auto file = tbtest::tiny_profile(dir, "backend: {compile: true}\n");
  CHECK_THROWS_WITH(load_profile(file, {"train.grad_accumulation=2"}),
                    Catch::Contains("backend.compile") && Catch::Contains("grad_accumulation"));
  CHECK_THROWS_WITH(load_profile(file, {"data.drop_last=false"}),
                    Catch::Contains("backend.compile") && Catch::Contains("drop_last"));
}

TEST_CASE("run with backend.compile on the CPU, --strict: the report lists the parts that ran and validates") {
  const auto dir = tbtest::scratch("compile-run");
  const auto file = tbtest::tiny_profile(dir, "backend: {compile: true}\n");
  const auto r = tbtest::run_cli("run --strict --quiet --config '" + file + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["status"] == "ok");
  const auto& e = j["effective"];
  CHECK(e["compile"].front() == "channels_last");
  CHECK(e["compile"].back() == "fused_sgd");
  CHECK(e["channels_last"] == true);
  CHECK(e["cuda_graph"] == false);
  bool graph_note = false;
  for (const auto& n : e["notes"])
    graph_note = graph_note || n.get<std::string>().rfind("backend.compile: cuda_graph not run here", 0) == 0;
  CHECK(graph_note);
  CHECK(std::isfinite(j["results"]["loss"]["last"].get<double>()));
  const auto errors = tbtest::schema_errors(j);
  INFO(errors.size() << " schema errors, first: " << (errors.empty() ? "" : errors.front()));
  CHECK(errors.empty());
}

TEST_CASE("PyTorch's batch-norm backend is asked, not assumed: its own kernels for every dtype on the CPU, and no bf16 note there") {
  for (const auto dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    INFO(c10::toString(dtype));
    CHECK(pytorch_batch_norm_backend(c10::kCPU, dtype, false) == "native");
    CHECK(pytorch_batch_norm_backend(c10::kCPU, dtype, true) == "native");
  }
  CHECK(bf16_batch_norm_note(c10::kCPU, true).empty());
  // The pipeline asks only on CUDA: a bf16 run on the CPU carries no such note.
  const auto dir = tbtest::scratch("bn-backend-cpu");
  profile p = load_profile(tbtest::tiny_profile(dir)).value;
  p.train.amp = amp_mode::bf16;
  effective_settings e;
  std::int64_t parameters = 0;
  pipeline built = build_pipeline(p, build_options{}, e, parameters);
  CHECK(e.amp == "bf16");
  for (const auto& note : e.notes) CHECK(note.find("batch norms") == std::string::npos);
}
