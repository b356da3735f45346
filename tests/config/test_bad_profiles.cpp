// Bad input gets a clear error: exit 2, the message names the key, and no report is written.
#include <catch2/catch.hpp>
#include <filesystem>

#include "helpers.hpp"

namespace fs = std::filesystem;

namespace {
struct bad_case {
  const char* yaml;
  const char* key;  // must appear in the message
};

const bad_case cases[] = {
    {"bach_size: 3\n", "bach_size"},
    {"train: {batch_sise: 3}\n", "did you mean 'batch_size'"},
    {"train: {batch_size: 0}\n", "train.batch_size"},
    {"train: {batch_size: -1}\n", "train.batch_size"},
    {"train: {batch_size: abc}\n", "train.batch_size"},
    {"data: {workers: -1}\n", "data.workers"},
    {"train: {optimizer: {lr: 0}}\n", "train.optimizer.lr"},
    {"train: {optimizer: {lr: -0.1}}\n", "train.optimizer.lr"},
    {"data: {image_size: 4}\n", "data.image_size"},
    {"measure: {repeats: 0}\n", "measure.repeats"},
    {"data: {normalize: {mean: [0.5, 0.5]}}\n", "data.normalize.mean"},
    {"data: {normalize: {std: [0.5, 0, 0.5]}}\n", "data.normalize.std"},
    {"train: {amp: fp8}\n", "allowed: off, fp16, bf16"},
    {"device: tpu\n", "device"},
    {"data: {source: imagenet}\n", "data.source"},
    {"measure: {nvtx: all}\n", "measure.nvtx"},
    {"dist: {backend: mpi}\n", "dist.backend"},
    {"model: {arch: resnet5}\n", "did you mean 'resnet50'"},
    {"model: {arch: vgg16}\n", "allowed: resnet18, resnet34, resnet50"},
    {"model: {zero_init_residual: maybe}\n", "model.zero_init_residual"},
    {"model: {num_classes: 0}\n", "model.num_classes"},
    {"train: {grad_accumulation: 0}\n", "train.grad_accumulation"},
    {"transfer: {depth: 1}\n", "transfer.depth"},
    {"train: {grad_scaler: maybe}\n", "train.grad_scaler"},
    {"train: {grad_scaler: on}\n", "train.grad_scaler"},
    {"backend: {cuda_graph: true}\ntrain: {grad_accumulation: 2}\n", "backend.cuda_graph"},
    {"data: {split: validation}\n", "data.split"},
    {"measure: {measured_batches: 0}\n", "measure.measured_batches"},
    {"data: {pin_memory: maybe}\n", "data.pin_memory"},
    {"model: [1, 2]\n", "model"},
    {"extends: missing.yaml\n", "extends"},
    {"data: {prefetch_factor: 0}\n", "data.prefetch_factor"},
    {"train: {optimizer: {momentum: 1.5}}\n", "train.optimizer.momentum"},
    {"threads: -2\n", "threads"},
    {"name: \"\"\n", "name"},
    {"train: {batch_size: [1,}\n", "invalid YAML"},
    {"train: {optimizer: {name: adam}}\n", "train.optimizer.name"},
    {"report: {path: \"\"}\n", "report.path"},
    {"backend: {tf32: 3}\n", "backend.tf32"},
    {"data: {source: cifar10, path: /nonexistent/cifar}\n", "/nonexistent/cifar"},
    {"data: {source: fashion-mnist, path: /nonexistent/fm}\n", "train-images-idx3-ubyte"},
    {"data: {samples: 3}\ntrain: {batch_size: 4}\n", "fewer than one batch"},
};
}  // namespace

TEST_CASE("bad profiles exit 2, name the key and write no report") {
  const auto dir = tbtest::scratch("bad");
  int i = 0;
  for (const auto& c : cases) {
    const fs::path file = dir / ("bad" + std::to_string(i++) + ".yaml");
    const fs::path report = dir / "report.json";
    // A small valid base so only the line under test is wrong.
    tbtest::write_text(file,
                       std::string("name: bad\ndevice: cpu\ndata: {source: synthetic, image_size: 16}\n") + c.yaml);
    const auto r = tbtest::run_cli("run --config '" + file.string() + "' --out '" + report.string() + "'");
    INFO(c.yaml << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(c.key) != std::string::npos);
    CHECK(r.output.find(file.filename().string()) != std::string::npos);
    CHECK_FALSE(fs::exists(report));
  }
  CHECK(i >= 30);
}

TEST_CASE("validate reports every bad file and exits 2") {
  const auto dir = tbtest::scratch("validate");
  tbtest::write_text(dir / "good.yaml", "name: good\n");
  tbtest::write_text(dir / "bad.yaml", "name: bad\ntrain: {amp: fp8}\n");
  auto r = tbtest::run_cli("validate '" + (dir / "good.yaml").string() + "' '" + (dir / "bad.yaml").string() + "'");
  CHECK(r.code == 2);
  CHECK(r.output.find("good.yaml: ok") != std::string::npos);
  CHECK(r.output.find("train.amp") != std::string::npos);
  r = tbtest::run_cli("validate '" + (dir / "good.yaml").string() + "'");
  CHECK(r.code == 0);
}

TEST_CASE("strict mode turns requested-but-ineffective switches into errors") {
  const auto dir = tbtest::scratch("strict");
  const auto file = tbtest::tiny_profile(dir, "transfer: {non_blocking: true}\n");
  const auto r = tbtest::run_cli("run --strict --config '" + file + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("transfer.non_blocking") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "tiny.json"));
}
