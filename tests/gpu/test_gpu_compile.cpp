// [gpu] tests of backend.compile: the compiled step (NHWC, fused batch norm where built, fused
// SGD, with and without the CUDA graph) against the eager NCHW step, in fp32, bf16 and fp16; and
// the switch as a pipeline builds it on CUDA. The CPU side is tests/stages/test_compile.cpp.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <torch/cuda.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>

#include "gpu/require_cuda.hpp"
#include "helpers.hpp"
#include "model_twins.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/measure/runner.hpp"
#include "trainbench/model/batch_norm_op.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/pipeline.hpp"

using namespace trainbench;

namespace {
using tbgpu::require_cuda;

// ||a - b|| / ||b|| over whole lists (every tensor flattened into one vector, in float64): one
// small tensor whose few elements round differently does not decide, a wrong update does.
double relative_error(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const at::Tensor x = a[i].detach().to(at::kCPU, at::kDouble), y = b[i].detach().to(at::kCPU, at::kDouble);
    diff += (x - y).pow(2).sum().item<double>();
    norm += y.pow(2).sum().item<double>();
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone().cpu());
  return out;
}

std::vector<at::Tensor> minus(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < a.size(); ++i) out.push_back(a[i].to(at::kDouble) - b[i].to(at::kDouble));
  return out;
}

// Running means and variances (floating buffers); batches-tracked counters separately, exactly.
std::vector<at::Tensor> running_stats(const resnet& m) {
  std::vector<at::Tensor> out;
  for (const auto& b : m->buffers())
    if (b.is_floating_point()) out.push_back(b.detach().clone().cpu());
  return out;
}
std::vector<at::Tensor> batch_counters(const resnet& m) {
  std::vector<at::Tensor> out;
  for (const auto& b : m->buffers())
    if (!b.is_floating_point()) out.push_back(b.detach().clone().cpu());
  return out;
}

// What each step sees: the gradients after its backward, unscaled, before the optimizer clears them.
std::vector<at::Tensor> unscaled_grads(const resnet& m, const at::Tensor& scale) {
  std::vector<at::Tensor> out;
  const double s = scale.defined() ? scale.item<double>() : 1.0;
  for (const auto& p : m->parameters()) out.push_back(p.grad().detach().to(at::kCPU, at::kDouble) / s);
  return out;
}

bool all_finite(const std::vector<at::Tensor>& v) {
  for (const auto& t : v)
    if (!at::isfinite(t).all().item<bool>()) return false;
  return true;
}

// Tolerances, relative in the norm over all tensors. fp32 (TF32 off): NHWC and NCHW kernels sum
// in other orders, nothing else. AMP: the two layouts pick other fp16 / bf16 kernels, whose
// rounding differs by up to the format's epsilon per element (bf16: 2^-8, fp16: 2^-11).
struct tolerances {
  double grads, loss, update, stats;
};
tolerances for_amp(amp_mode amp) {
  if (amp == amp_mode::off) return {1e-3, 1e-3, 5e-3, 1e-3};
  if (amp == amp_mode::fp16) return {2e-2, 1e-2, 5e-2, 1e-2};
  return {5e-2, 3e-2, 1e-1, 3e-2};
}

// Restores cuDNN's TF32 flag (LibTorch's default allows it) when the test leaves.
struct no_tf32 {
  bool was = at::globalContext().allowTF32CuDNN();
  no_tf32() { at::globalContext().setAllowTF32CuDNN(false); }
  ~no_tf32() { at::globalContext().setAllowTF32CuDNN(was); }
};
}  // namespace

TEST_CASE(
    "compiled step matches the eager NCHW step on CUDA: gradients after one step, loss after 5, running statistics, "
    "in fp32, bf16 and fp16, with and without a graph",
    "[gpu]") {
  require_cuda();
  const no_tf32 exact;  // fp32 means fp32 in both steps
  const c10::Device cuda(c10::kCUDA, 0);
  const std::vector<std::int64_t> shape{16, 3, 32, 32};
  for (amp_mode amp : {amp_mode::off, amp_mode::bf16, amp_mode::fp16}) {
    for (bool graph : {false, true}) {
      INFO(to_string(amp) << (graph ? ", graph" : ", no graph"));
      const tolerances tol = for_amp(amp);
      at::manual_seed(0);
      resnet eager_model = make_resnet("resnet18", 10), compiled_model = make_resnet("resnet18", 10);
      tbtest::copy_model_state(eager_model, compiled_model);
      eager_model->to(cuda);
      compiled_model->to(cuda);
      weights_to_channels_last(*compiled_model);
      fusion_request fr;
      fr.device = cuda;
      fr.amp = amp;
      fr.channels_last = true;
      fr.input_shape = shape;
      const fusion_outcome fused = fuse_batch_norm(compiled_model, fr);
      INFO("fusions applied: " << fused.applied.size());
      step_options o;
      o.device = cuda;
      o.amp = amp;
      o.scaler = amp == amp_mode::fp16;
      o.optimizer.lr = 0.05;  // large enough that 5 steps on one batch move the loss well past the tolerance
      o.optimizer.momentum = 0.9;
      o.optimizer.weight_decay = 1e-4;
      step_options fo = o;
      fo.fused_sgd = true;
      auto eager = make_eager_step(eager_model, o);
      auto compiled = graph ? make_graph_step(compiled_model, fo, shape, true) : make_eager_step(compiled_model, fo);
      if (graph) compiled->prepare();  // the capture's warm-up updates are undone
      const auto start = copies(eager_model->parameters());

      // One batch, five times: the loss falls far, so a step that trains differently shows.
      at::manual_seed(42);
      device_batch batch{at::randn({shape[0], 3, shape[2], shape[3]}).to(cuda),
                         at::randint(10, {shape[0]}, at::kLong).to(cuda), 0, shape[0]};
      device_batch nhwc = batch;
      nhwc.images = batch.images.contiguous(at::MemoryFormat::ChannelsLast);
      double first_loss = 0, last_eager = 0, last_compiled = 0;
      bool grads_checked = false;
      for (int step = 0; step < 5; ++step) {
        const at::Tensor scale = o.scaler ? eager->loss_scale().clone() : at::Tensor();
        const double skipped_before = o.scaler ? compiled->skipped_steps().item<double>() : 0;
        eager->forward(batch);
        eager->backward();
        compiled->forward(nhwc);  // a graph step replays forward, backward and the optimizer here
        if (!graph) compiled->backward();
        const auto ge = unscaled_grads(eager_model, scale);
        // fp16 at the scaler's first scale (65536) may overflow: compare the first step whose
        // gradients are finite (the loss below holds the skipped steps to each other too).
        if (!grads_checked && all_finite(ge)) {
          // The graph's fused SGD wrote the unscaled gradients back, unless it skipped the step
          // (found_inf: the kernel returns before touching anything); the eager compiled step
          // has not stepped yet, so its gradients are still scaled.
          const bool graph_skipped = graph && o.scaler && compiled->skipped_steps().item<double>() > skipped_before;
          const auto gc = unscaled_grads(compiled_model, graph && !graph_skipped ? at::Tensor() : scale);
          CHECK(relative_error(gc, ge) < tol.grads);
          grads_checked = true;
        }
        eager->optimizer_step();
        if (!graph) compiled->optimizer_step();
        last_eager = eager->last_loss().item<double>();
        last_compiled = compiled->last_loss().item<double>();
        if (step == 0) first_loss = last_eager;
        CHECK(last_compiled == Approx(last_eager).epsilon(tol.loss));
      }
      torch::cuda::synchronize();
      CHECK(grads_checked);
      CHECK(last_eager < first_loss * (1 - 5 * tol.loss));  // it trained: the loss check means something
      const auto ue = minus(copies(eager_model->parameters()), start);
      const auto uc = minus(copies(compiled_model->parameters()), start);
      CHECK(relative_error(uc, ue) < tol.update);
      CHECK(relative_error(running_stats(compiled_model), running_stats(eager_model)) < tol.stats);
      const auto ce = batch_counters(eager_model), cc = batch_counters(compiled_model);
      REQUIRE(ce.size() == cc.size());
      for (std::size_t i = 0; i < ce.size(); ++i) CHECK(at::equal(cc[i], ce[i]));
      if (o.scaler) CHECK(compiled->skipped_steps().item<double>() == eager->skipped_steps().item<double>());
    }
  }
}

TEST_CASE("backend.compile on the GPU: NHWC, the fusions built, fused SGD and one graph, said in effective.compile",
          "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-compile");
  tbtest::write_text(dir / "p.yaml",
                     "name: gpu-compile\ndevice: cuda\ndata: {source: synthetic, samples: 512, image_size: 32}\n"
                     "train: {batch_size: 16, amp: fp16}\nbackend: {compile: true}\n"
                     "measure: {warmup_batches: 3, measured_batches: 5, nvtx: off}\n");
  const profile prof = load_profile(dir / "p.yaml").value;
  effective_settings e;
  std::int64_t parameters = 0;
  pipeline p = build_pipeline(prof, build_options{}, e, parameters);

  resnet probe = make_resnet("resnet18", 10);
  probe->to(at::kCUDA);
  fusion_request fr;
  fr.device = c10::Device(c10::kCUDA, 0);
  fr.amp = amp_mode::fp16;
  fr.channels_last = true;
  fr.input_shape = {16, 3, 32, 32};
  const fusion_outcome fusions = fuse_batch_norm(probe, fr);
  std::vector<std::string> expected{"channels_last"};
  for (const auto& f : fusions.applied) expected.push_back(f);
  expected.push_back("fused_sgd");
  expected.push_back("cuda_graph");
  CHECK(e.compile == expected);
  std::vector<std::string> notes;
  for (const auto& f : fusions.ineffective) notes.push_back("backend.compile: " + f);
  CHECK(e.notes == notes);
  CHECK(e.cuda_graph);
  CHECK(e.channels_last);
  CHECK_THAT(e.step, Catch::Contains("CUDA graph") && Catch::Contains("fused SGD"));
  runner r(p, prof.measure);
  r.run();
  CHECK(std::isfinite(*r.result().loss_last));
  // It trained: loss scaling skipped only the first few steps (the scale halves from 65536 with
  // each). Whether the loss falls within a few steps on random labels is a matter of the batch,
  // not of the compiled step; the numerics cases hold the step against the eager one.
  REQUIRE(r.result().skipped_steps);
  CHECK(*r.result().skipped_steps < 8);
  // The profiled window after the measured ones saw the graph's kernels, in every family.
  REQUIRE(r.result().kernel_families);
  const kernel_family_result& k = *r.result().kernel_families;
  INFO(k.reason);
  REQUIRE(k.measured);
  CHECK(k.batches == prof.measure.measured_batches);
  for (const char* family : {"convolution", "norm_activation", "optimizer"}) {
    INFO(family);
    CHECK(k.seconds.at(family) > 0);
  }
  // The names behind each family, for the log: whether the classification put the fused batch
  // norm's cuDNN kernels where they belong. The loss scaler's adds are in norm_activation too, so
  // its time alone proves nothing; a batch norm or ReLU by name among its longest kernels would.
  // cuDNN's graph engines do not document their kernels' names, and a name with only "cudnn" in
  // it counts as a convolution: until a GPU run has shown them, a miss is a warning to read, not
  // a failure.
  std::string names;
  for (const auto& [family, tops] : k.top)
    for (const kernel_top& t : tops) names += family + ": " + t.name + "\n";
  WARN("dropped records: " << k.dropped << "; the longest kernels per family:\n" << names);
  bool named = false;
  for (const kernel_top& t : k.top.at("norm_activation")) {
    std::string n = t.name;
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    for (const char* m : {"bn_", "norm", "relu", "clamp", "threshold", "welford"})
      named = named || n.find(m) != std::string::npos;
  }
  if (!named) WARN("no batch norm or ReLU by name among norm_activation's longest kernels: read the names above");
}

TEST_CASE("PyTorch's own batch norm on the GPU: cuDNN in fp16 and fp32, its own kernels in bf16, and a bf16 run says so",
          "[gpu]") {
  require_cuda();
  const c10::Device cuda(c10::kCUDA, 0);
  // PyTorch 2.11's _select_batch_norm_backend never gives bf16 to cuDNN (docs/fused-batch-norm.md):
  // the one known difference between the eager fp16 and bf16 rungs.
  for (const bool channels_last : {false, true}) {
    INFO("channels_last " << channels_last);
    CHECK(pytorch_batch_norm_backend(cuda, at::kHalf, channels_last) == "cudnn");
    CHECK(pytorch_batch_norm_backend(cuda, at::kFloat, channels_last) == "cudnn");
    CHECK(pytorch_batch_norm_backend(cuda, at::kBFloat16, channels_last) == "native");
  }
  const auto dir = tbtest::scratch("gpu-bn-backend");
  auto notes_of = [&](const std::string& amp) {
    tbtest::write_text(dir / "p.yaml",
                       "name: gpu-bn-backend\ndevice: cuda\ndata: {source: synthetic, samples: 64, image_size: 32}\n"
                       "model: {channels_last: true}\ntrain: {batch_size: 8, amp: " +
                           amp + "}\nmeasure: {warmup_batches: 1, measured_batches: 2, nvtx: off}\n");
    const profile prof = load_profile(dir / "p.yaml").value;
    effective_settings e;
    std::int64_t parameters = 0;
    pipeline p = build_pipeline(prof, build_options{}, e, parameters);
    return e.notes;
  };
  const std::vector<std::string> bf16 = notes_of("bf16");
  REQUIRE(bf16.size() == 1);
  CHECK(bf16[0] == bf16_batch_norm_note(cuda, true));
  CHECK_THAT(bf16[0], Catch::StartsWith("train.amp: bf16: PyTorch gives batch norms in bf16 to PyTorch's own kernels "
                                        "but in fp16 to cuDNN's kernels"));
  CHECK(notes_of("fp16").empty());
  CHECK(notes_of("off").empty());
}

// backend.pad_stem: the stem convolution on 4 channels trains as on 3 (the 4th is zeros in the
// input and the weights), in the compiled step the kit measures it in, with and without the graph.
// What it is worth is the kit's best/03 rung against best/02, not a test.
TEST_CASE("backend.pad_stem on the GPU: the padded stem trains as the plain one in fp16 and bf16, and a run says it ran",
          "[gpu]") {
  require_cuda();
  const c10::Device cuda(c10::kCUDA, 0);
  const std::vector<std::int64_t> shape{16, 3, 64, 64};
  for (amp_mode amp : {amp_mode::fp16, amp_mode::bf16}) {
    for (bool graph : {false, true}) {
      INFO(to_string(amp) << (graph ? ", graph" : ", no graph"));
      const tolerances tol = for_amp(amp);
      at::manual_seed(0);
      resnet plain_model = make_resnet("resnet18", 10), padded_model = make_resnet("resnet18", 10);
      tbtest::copy_model_state(plain_model, padded_model);
      for (resnet* m : {&plain_model, &padded_model}) {
        (*m)->to(cuda);
        weights_to_channels_last(**m);
      }
      padded_model->set_stem_padded(true);
      step_options o;
      o.device = cuda;
      o.amp = amp;
      o.scaler = amp == amp_mode::fp16;
      o.fused_sgd = true;
      o.optimizer.lr = 0.05;
      o.optimizer.momentum = 0.9;
      o.optimizer.weight_decay = 1e-4;
      auto make = [&](resnet& m) { return graph ? make_graph_step(m, o, shape, true) : make_eager_step(m, o); };
      auto plain = make(plain_model), padded = make(padded_model);
      if (graph) {
        plain->prepare();
        padded->prepare();
      }
      const auto start = copies(plain_model->parameters());
      at::manual_seed(42);
      device_batch batch{at::randn({shape[0], 3, shape[2], shape[3]}).to(cuda).contiguous(at::MemoryFormat::ChannelsLast),
                         at::randint(10, {shape[0]}, at::kLong).to(cuda), 0, shape[0]};
      double first = 0, last_plain = 0;
      for (int step = 0; step < 5; ++step) {
        for (auto* s : {plain.get(), padded.get()}) {
          s->forward(batch);
          if (!graph) {
            s->backward();
            s->optimizer_step();
          }
        }
        last_plain = plain->last_loss().item<double>();
        if (step == 0) first = last_plain;
        CHECK(padded->last_loss().item<double>() == Approx(last_plain).epsilon(tol.loss));
      }
      torch::cuda::synchronize();
      CHECK(last_plain < first * (1 - 5 * tol.loss));  // it trained: the loss check means something
      CHECK(padded_model->named_parameters()["conv1.weight"].sizes() == at::IntArrayRef({64, 3, 7, 7}));
      const auto up = minus(copies(padded_model->parameters()), start);
      const auto uq = minus(copies(plain_model->parameters()), start);
      CHECK(relative_error(up, uq) < tol.update);
      CHECK(relative_error(running_stats(padded_model), running_stats(plain_model)) < tol.stats);
      if (o.scaler) CHECK(padded->skipped_steps().item<double>() == plain->skipped_steps().item<double>());
    }
  }
  const auto dir = tbtest::scratch("gpu-pad-stem");
  tbtest::write_text(dir / "p.yaml",
                     "name: gpu-pad-stem\ndevice: cuda\ndata: {source: synthetic, samples: 512, image_size: 32}\n"
                     "train: {batch_size: 16, amp: fp16}\nbackend: {compile: true, pad_stem: true}\n"
                     "measure: {warmup_batches: 3, measured_batches: 5, nvtx: off, kernel_families: false}\n");
  const auto r = tbtest::run_cli("run --strict --quiet --config '" + (dir / "p.yaml").string() + "' --out '" +
                                 (dir / "r.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "r.json");
  CHECK(j["effective"]["pad_stem"] == true);
  CHECK(std::isfinite(j["results"]["loss"]["last"].get<double>()));
}
