// The family beyond ResNet-18 through the training stages: a grouped bottleneck model with the
// precision and layout switches, gradient accumulation, a ResNet-50 rung from the command line;
// on a GPU, the graph step, batch_size: auto and the ResNet-50 ladder. (Every architecture's
// training step on the CPU: tests/model/test_resnet.cpp.)
#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "gpu/compile_notes.hpp"
#include "gpu/exact_math.hpp"
#include "helpers.hpp"
#include "model_twins.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/report/ladder.hpp"
#include "trainbench/stages/train_step.hpp"
#include "trainbench/stages/weights.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

device_batch fixed_batch(std::int64_t n, std::int64_t size, std::uint64_t seed, c10::Device device = c10::kCPU) {
  at::manual_seed(seed);
  return {at::randn({n, 3, size, size}).to(device), at::randint(10, {n}, at::kLong).to(device), 0, n};
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone().cpu());
  return out;
}

// How many parameter tensors differ between two snapshots.
std::size_t moved(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += !at::equal(a[i], b[i]);
  return n;
}

void require_cuda() {
  if (!torch::cuda::is_available()) FAIL("no CUDA device: run [gpu] tests on a GPU host (ctest -L gpu)");
}

}  // namespace

TEST_CASE("a grouped bottleneck model with fp16 + loss scaling, and with bf16 + channels_last, on the CPU") {
  for (const bool fp16 : {true, false}) {
    INFO((fp16 ? "fp16 + scaler" : "bf16 + channels_last"));
    at::manual_seed(0);
    resnet m = make_resnet("resnext50_32x4d", 10);
    if (!fp16) weights_to_channels_last(*m);
    step_options o;
    o.amp = fp16 ? amp_mode::fp16 : amp_mode::bf16;
    o.scaler = fp16;
    o.optimizer.lr = 0.001;
    auto step = make_eager_step(m, o);
    device_batch batch = fixed_batch(4, 32, 2);
    if (!fp16) batch.images = batch.images.contiguous(at::MemoryFormat::ChannelsLast);
    const auto before = clones(m->parameters());
    step->forward(batch);
    step->backward();
    step->optimizer_step();
    CHECK(std::isfinite(step->last_loss().item<double>()));
    const std::size_t n = moved(before, clones(m->parameters()));
    if (fp16) {
      // The scaler either applied the step (every parameter moved) or skipped it for overflowing
      // gradients at its initial scale (none moved, and it says so).
      const double skipped = step->skipped_steps().item<double>();
      CHECK(((skipped == 0 && n == before.size()) || (skipped == 1 && n == 0)));
    } else {
      CHECK(n == before.size());
      CHECK(m->named_parameters()["layer1.0.conv2.weight"].is_contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
}

TEST_CASE("ResNet-50: gradient accumulation k=2 at batch 4 matches batch 8") {
  const auto big = fixed_batch(8, 16, 3);
  auto train = [&](int k) {
    at::manual_seed(0);
    resnet m = make_resnet("resnet50", 10);
    m->eval();  // batch-norm statistics per micro-batch would differ; compare the arithmetic
    step_options o;
    o.accumulation = k;
    o.optimizer.lr = 0.05;
    auto step = make_eager_step(m, o);
    const std::int64_t n = 8 / k;
    for (int i = 0; i < k; ++i) {
      step->forward({big.images.narrow(0, i * n, n), big.labels.narrow(0, i * n, n), 0, n});
      step->backward();
      step->optimizer_step();
    }
    return clones(m->parameters());
  };
  const auto one = train(1), two = train(2);
  for (std::size_t i = 0; i < one.size(); ++i) CHECK(at::allclose(one[i], two[i], 1e-4, 1e-6));
}

TEST_CASE("a ResNet-50 rung from the command line: the model block, the compute block, saved weights") {
  const auto dir = tbtest::scratch("resnet50-cli");
  const auto report = dir / "r50.json", weights = dir / "r50.pt";
  const auto r = tbtest::run_cli(
      "run --quiet --config configs/resnet50/05-recipe.yaml --set device=cpu --set threads=1 --set data.workers=0"
      " --set data.pin_memory=false --set transfer.non_blocking=false --set train.amp=off"
      " --set data.image_size=32 --set data.source_size=32 --set data.samples=8 --set train.batch_size=2"
      " --set measure.warmup_batches=1 --set measure.measured_batches=1 --set measure.repeats=2 --set measure.nvtx=off"
      " --set model.zero_init_residual=true --out '" +
      report.string() + "' --save-weights '" + weights.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(report);
  CHECK(tbtest::schema_errors(j).empty());
  CHECK(j["model"]["arch"] == "resnet50");
  CHECK(j["model"]["parameters"] == 25557032);
  CHECK(j["model"]["input_shape"] == nlohmann::json::array({3, 32, 32}));
  CHECK(j["model"]["forward_flops_per_sample"].get<double>() ==
        forward_flops(*find_resnet_spec("resnet50"), 1000, 32, 32));
  const auto& c = j["results"]["compute"];
  CHECK(c["train_flops_per_sample"].get<double>() == 3 * j["model"]["forward_flops_per_sample"].get<double>());
  CHECK(c["model_flops_per_s"].get<double>() ==
        Approx(c["train_flops_per_sample"].get<double>() * j["results"]["samples_per_s"]["median"].get<double>()));
  CHECK(c["devices"] == 1);
  CHECK(c["peak_flops_per_s"].is_null());  // a CPU: no peak in the table
  CHECK(c["share_of_peak"].is_null());

  CHECK(j["profile"]["resolved"].get<std::string>().find("zero_init_residual: true") != std::string::npos);
  // The saved state dict loads into a fresh ResNet-50 and holds the trained weights.
  resnet fresh = make_resnet("resnet50", 1000);
  const auto initial = clones(fresh->parameters());
  load_weights(*fresh, weights);
  CHECK(moved(initial, clones(fresh->parameters())) == initial.size());
}

TEST_CASE("zero_init_residual with model.weights is reported as ineffective") {
  const auto dir = tbtest::scratch("zero-init-weights");
  const auto weights = dir / "w.pt";
  save_weights(*make_resnet("resnet18", 10), weights);
  const std::string args = " --config '" + tbtest::tiny_profile(dir) +
                           "' --set model.zero_init_residual=true --set model.weights='" + weights.string() + "'";
  auto r = tbtest::run_cli("run --quiet" + args);
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto notes = tbtest::read_json(dir / "tiny.json")["effective"]["notes"].dump();
  CHECK(notes.find("model.zero_init_residual: requested but ineffective: model.weights") != std::string::npos);
  r = tbtest::run_cli("run --quiet --strict" + args);
  CHECK(r.code == 2);
  CHECK(r.output.find("model.zero_init_residual") != std::string::npos);
}

TEST_CASE("the ResNet-50 ladder validates, and its top rungs are NVIDIA's recipe") {
  const auto files = ladder_profiles({(tbtest::source_dir() / "configs/resnet50").string()});
  REQUIRE(files.size() >= 8);
  for (const auto& f : files) {
    INFO(f);
    const profile p = load_profile(f).value;
    CHECK(p.model.arch == "resnet50");
    CHECK(p.data.image_size == 224);
  }
  const profile recipe = load_profile(tbtest::source_dir() / "configs/resnet50/06-recipe-device-synthetic.yaml").value;
  CHECK(recipe.train.batch_size == 256);
  CHECK(recipe.train.amp == amp_mode::fp16);
  CHECK(recipe.model.channels_last);
  CHECK(recipe.train.optimizer.lr == 0.256);
  CHECK(recipe.train.optimizer.momentum == 0.875);
  CHECK(recipe.data.source == data_source::device_synthetic);
  // 08: the recipe (05) on JPEGs decoded by nvJPEG, as NVIDIA measured it through DALI.
  const profile jpeg = load_profile(tbtest::source_dir() / "configs/resnet50/08-recipe-imagefolder.yaml").value;
  const profile through_loader = load_profile(tbtest::source_dir() / "configs/resnet50/05-recipe.yaml").value;
  CHECK(jpeg.data.source == data_source::imagefolder);
  CHECK(jpeg.data.decode == decode_place::device);
  CHECK(jpeg.data.transform == data_transform::train);
  CHECK(jpeg.train.batch_size == through_loader.train.batch_size);
  CHECK(jpeg.train.amp == through_loader.train.amp);
  CHECK(jpeg.model.channels_last);
  CHECK(jpeg.transfer.copy_stream);
  // 09 and 10: 07's and 08's step compiled, nothing else changed (the MLPerf goal's rung, and it on JPEGs).
  const profile graphed = load_profile(tbtest::source_dir() / "configs/resnet50/07-cuda-graph.yaml").value;
  const profile compiled = load_profile(tbtest::source_dir() / "configs/resnet50/09-compile.yaml").value;
  const profile compiled_jpeg =
      load_profile(tbtest::source_dir() / "configs/resnet50/10-compile-imagefolder.yaml").value;
  CHECK(compiled.backend.compile);
  CHECK(compiled_jpeg.backend.compile);
  profile uncompiled = compiled, uncompiled_jpeg = compiled_jpeg;
  uncompiled.backend.compile = uncompiled_jpeg.backend.compile = false;
  CHECK(workload_hash(uncompiled) == workload_hash(graphed));
  CHECK(workload_hash(uncompiled_jpeg) == workload_hash(jpeg));
  CHECK(compiled.data.source == data_source::device_synthetic);
  CHECK(compiled_jpeg.data.decode == decode_place::device);
  CHECK(compiled_jpeg.train.batch_size == jpeg.train.batch_size);
  CHECK(compiled_jpeg.transfer.copy_stream);
}

// The ResNet-50 graph-versus-eager comparison's setup, shared by its [gpu] test and the CPU test
// that checks the setup itself trains to finite numbers. Training mode: in eval mode fresh
// running statistics (mean 0, variance 1) make every batch norm an identity, and an
// unnormalised ResNet-50 (no zero-initialised residual branches) overflows in its first steps.
struct r50_twin_setup {
  static constexpr int steps = 4;
  static constexpr std::int64_t batch = 8, size = 64;
  static constexpr double lr = 0.01;
};

std::vector<device_batch> r50_twin_batches(c10::Device device) {
  std::vector<device_batch> data;
  for (int i = 0; i < r50_twin_setup::steps; ++i)
    data.push_back(fixed_batch(r50_twin_setup::batch, r50_twin_setup::size, 100 + i, device));
  return data;
}

step_options r50_twin_options(c10::Device device, amp_mode amp) {
  step_options o;
  o.device = device;
  o.amp = amp;
  o.optimizer.lr = r50_twin_setup::lr;
  o.optimizer.foreach = true;
  return o;
}

TEST_CASE("ResNet-50 in the GPU graph twin test's setup trains to finite losses on the CPU (fp32)") {
  at::manual_seed(0);
  resnet model = make_resnet("resnet50", 10);
  model->train();
  auto step = make_eager_step(model, r50_twin_options(c10::kCPU, amp_mode::off));
  std::vector<double> losses;
  for (const auto& b : r50_twin_batches(c10::kCPU)) {
    step->forward(b);
    step->backward();
    step->optimizer_step();
    losses.push_back(step->last_loss().item<double>());
  }
  INFO("losses " << losses[0] << " " << losses[1] << " " << losses[2] << " " << losses[3]);
  for (double l : losses) CHECK(std::isfinite(l));
  std::size_t finite = 0;
  const auto params = model->parameters();
  for (const auto& p : params) finite += at::isfinite(p).all().item<bool>() ? 1 : 0;
  CHECK(finite == params.size());
}

TEST_CASE("ResNet-50's graphed step matches an eager twin on CUDA, fp32 and bf16", "[gpu]") {
  require_cuda();
  const tbgpu::cuda_math_guard exact(tbgpu::cuda_math::exact);  // no TF32, deterministic cuDNN: see exact_math.hpp
  const c10::Device cuda(c10::kCUDA, 0);
  for (amp_mode amp : {amp_mode::off, amp_mode::bf16}) {
    INFO(to_string(amp));
    const double tol = amp == amp_mode::off ? 1e-3 : 3e-2;
    at::manual_seed(0);
    resnet graphed = make_resnet("resnet50", 10), eager = make_resnet("resnet50", 10);
    tbtest::copy_model_state(graphed, eager);
    graphed->to(cuda);
    eager->to(cuda);
    graphed->train();
    eager->train();
    auto gstep = make_graph_step(graphed, r50_twin_options(cuda, amp), {8, 3, 64, 64}, false);
    auto estep = make_eager_step(eager, r50_twin_options(cuda, amp));
    // The graph's capture undoes its eager warm-up steps (weights, batch-norm statistics,
    // momentum): both train on the same batches, one step each.
    const auto data = r50_twin_batches(cuda);
    for (const auto& b : data) {
      gstep->forward(b);
      estep->forward(b);
      estep->backward();
      estep->optimizer_step();
    }
    torch::cuda::synchronize();
    REQUIRE(std::isfinite(estep->last_loss().item<double>()));
    const auto pg = clones(graphed->parameters()), pe = clones(eager->parameters());
    for (std::size_t i = 0; i < pg.size(); ++i) CHECK(at::allclose(pg[i], pe[i], tol, tol));
    CHECK(gstep->last_loss().item<double>() == Approx(estep->last_loss().item<double>()).epsilon(tol * 10));
  }
}

TEST_CASE("the ResNet-50 ladder runs on the GPU, the report has the share of peak", "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-resnet50");
  // The JPEG rung (08) reads a folder of its own here, whatever data/ holds.
  const auto made =
      tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "jpeg").string() + "' --classes 10 --per-class 8");
  REQUIRE(made.code == 0);
  for (const auto& file : ladder_profiles({(tbtest::source_dir() / "configs/resnet50").string()})) {
    INFO(file);
    const profile p = load_profile(file).value;
    const auto report = dir / (fs::path(file).stem().string() + ".json");
    const std::string data =
        p.data.source == data_source::imagefolder ? " --set data.path='" + (dir / "jpeg").string() + "'" : "";
    const auto r = tbtest::run_cli("run --strict --quiet --config '" + file + "'" + data +
                                   " --set train.batch_size=32 --set measure.warmup_batches=3"
                                   " --set measure.measured_batches=2 --set measure.repeats=2 --out '" +
                                   report.string() + "'");
    INFO(r.output);
    CHECK(r.code == 0);
    const auto j = tbtest::read_json(report);
    CHECK(j["status"] == "ok");
    // The compiled rungs (09, 10) note only what fuse_batch_norm leaves unfused on this GPU.
    CHECK(j["effective"]["notes"].get<std::vector<std::string>>() == tbgpu::expected_notes(p, 32));
    if (p.backend.compile) CHECK(j["effective"]["compile"].back() == "cuda_graph");
    CHECK(j["effective"]["conv_fusion"].empty() == !p.backend.conv_fusion);
    // 25,557,032 with torchvision's 1000 classes; the classifier has 2048 weights and a bias per class.
    CHECK(j["model"]["parameters"] == 25557032 - 2049 * (1000 - p.model.num_classes));
    CHECK(j["model"]["forward_flops_per_sample"].get<double>() ==
          forward_flops(*find_resnet_spec("resnet50"), p.model.num_classes, 224, 224));
    const auto& c = j["results"]["compute"];
    if (!c["peak_flops_per_s"].is_null()) CHECK(c["share_of_peak"].get<double>() > 0);
  }
}

TEST_CASE("batch_size: auto finds a batch for the ResNet-50 recipe on the GPU", "[gpu]") {
  require_cuda();
  const auto dir = tbtest::scratch("gpu-resnet50-auto");
  const auto report = dir / "auto.json";
  const auto r = tbtest::run_cli(
      "run --quiet --config configs/resnet50/05-recipe.yaml --set train.batch_size=auto"
      " --set data.source=device-synthetic --set data.workers=0 --set data.pin_memory=false"
      " --set transfer.non_blocking=false --set measure.warmup_batches=3 --set measure.measured_batches=2"
      " --set measure.repeats=1 --out '" +
      report.string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(report);
  CHECK(j["effective"]["batch_size"].get<std::int64_t>() >= 8);
  CHECK(j["effective"]["batch_size_search"].size() >= 2);
}
