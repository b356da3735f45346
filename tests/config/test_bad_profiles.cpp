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
    {"data: {device_decode_share: 1.5}\n", "data.device_decode_share"},
    {"data: {device_decode_share: -0.1}\n", "must be in [0, 1]"},
    {"data: {device_decode_share: most}\n", "data.device_decode_share"},
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
    {"train: {batch_size: 1}\n", "train.batch_size"},
    {"train: {optimizer: {lr: 1e39}}\n", "train.optimizer.lr"},
    {"dist: {timeout_s: .inf}\n", "dist.timeout_s"},
};
}  // namespace

TEST_CASE("bad profiles exit 2, name the key and write no report") {
  const auto dir = tbtest::scratch("bad");
  int i = 0;
  for (const auto& c : cases) {
    const fs::path file = dir / ("bad" + std::to_string(i++) + ".yaml");
    const fs::path report = dir / "report.json";
    // A small valid base so only the line under test is wrong; a block the case writes replaces
    // the base's (a key written twice is an error of its own).
    std::string text;
    for (const std::string line : {"name: bad\n", "device: cpu\n", "data: {source: synthetic, image_size: 16}\n"}) {
      const std::string key = line.substr(0, line.find(':') + 1);
      const std::string yaml = std::string("\n") + c.yaml;
      if (yaml.find("\n" + key) == std::string::npos) text += line;
    }
    tbtest::write_text(file, text + c.yaml);
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

TEST_CASE("a value no machine can serve exits 2 at load, naming the key, the value, the need and the bound") {
  const auto dir = tbtest::scratch("huge");
  const std::string file = tbtest::tiny_profile(dir);
  struct huge_case {
    const char* set;
    const char* key;
    const char* need;  // a word of what it would take
    const char* bound;
  };
  const huge_case cases[] = {
      {"data.image_size=100000", "data.image_size", "GiB", "8192"},
      {"threads=100000", "threads", "threads", "1024"},
      {"model.num_classes=100000000", "model.num_classes", "GiB", "1000000"},
      {"data.workers=100000", "data.workers", "loader threads", "1024"},
      {"data.prefetch_factor=100000", "data.prefetch_factor", "batch buffers", "1024"},
      {"data.samples=1000000000", "data.samples", "GiB", "100000000"},
      {"data.source_size=100000", "data.source_size", "GiB", "8192"},
      {"measure.measured_batches=100000000", "measure.measured_batches", "timing records", "1000000"},
      {"measure.warmup_batches=2147483647", "measure.warmup_batches", "batches", "1000000"},
      {"train.batch_size=100000000", "train.batch_size", "images per batch", "1048576"},
      {"dist.timeout_s=1e300", "dist.timeout_s", "days", "604800"},
      {"train.optimizer.lr=.inf", "train.optimizer.lr", "finite", "inf"},
      // Each within its own bound, together past the host memory bound (1 TiB).
      {"train.batch_size=65536 --set data.image_size=2048", "train.batch_size", "TiB", "1.0 TiB"},
      {"data.samples=100000000 --set data.source_size=128", "data.samples", "synthetic images", "1.0 TiB"},
  };
  for (const auto& c : cases) {
    const auto r = tbtest::run_cli("run --config " + file + " --set " + c.set);
    INFO(c.set << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains(c.key) && Catch::Contains(c.need) && Catch::Contains(c.bound));
    CHECK_FALSE(fs::exists(dir / "tiny.json"));
  }
  // The issue's own example: 3 x 100000 x 100000 floats.
  const auto r = tbtest::run_cli("run --config " + file + " --set data.image_size=100000");
  CHECK_THAT(r.output, Catch::Contains("100000 is more than any machine can serve") && Catch::Contains("111.8 GiB"));
}

TEST_CASE("a report name no file system takes exits 2 at load") {
  const auto dir = tbtest::scratch("long-name");
  const std::string file = tbtest::tiny_profile(dir);
  auto r = tbtest::run_cli("run --config " + file + " --set report.path=" + (dir / "{name}.json").string() +
                           " --set name=" + std::string(300, 'n'));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("key 'name'") && Catch::Contains("at most 255"));
  r = tbtest::run_cli("run --config " + file + " --set report.path=" + (dir / std::string(300, 'r')).string());
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("key 'report.path'"));
}

TEST_CASE("valid but large values keep working") {
  const auto dir = tbtest::scratch("large");
  const std::string file = tbtest::tiny_profile(dir);
  // A big classifier, many synthetic images, a large image through the loader, more threads
  // than cores: all within the bounds, so all run.
  auto r = tbtest::run_cli("run --quiet --config " + file +
                           " --set model.num_classes=100000 --set data.samples=100000 --set threads=16"
                           " --set measure.repeats=1 --set measure.measured_batches=1 --set measure.warmup_batches=0");
  INFO(r.output);
  CHECK(r.code == 0);
  r = tbtest::run_cli("bench-data --quiet --config " + file +
                      " --set data.image_size=1024 --set data.workers=2 --set data.prefetch_factor=2"
                      " --set train.batch_size=2 --set data.samples=8");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(tbtest::read_json(dir / "tiny.json")["status"] == "ok");
}

TEST_CASE("an empty profile, or one without a known key, exits 2") {
  const auto dir = tbtest::scratch("empty");
  tbtest::write_text(dir / "base.yaml", "# nothing here\n");
  const std::pair<const char*, const char*> files[] = {
      {"empty.yaml", ""},
      {"comments.yaml", "# a comment only\n"},
      {"braces.yaml", "{}\n"},
      {"unknown.yaml", "foo: 1\nbar: {baz: 2}\n"},
      {"extends-empty.yaml", "extends: base.yaml\n"},
  };
  for (const auto& [name, text] : files) {
    tbtest::write_text(dir / name, text);
    const auto r = tbtest::run_cli("run --config " + (dir / name).string() + " --out " + (dir / "r.json").string());
    INFO(name << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains("empty profile") && Catch::Contains(name));
    CHECK_FALSE(fs::exists(dir / "r.json"));
  }
  const auto r = tbtest::run_cli("validate " + (dir / "unknown.yaml").string());
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("foo, bar"));
}
