#include <catch2/catch.hpp>
#include <filesystem>

#include "helpers.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

TEST_CASE("every shipped profile validates") {
  int count = 0;
  for (const auto& e : fs::recursive_directory_iterator(tbtest::source_dir() / "configs")) {
    if (e.path().extension() != ".yaml") continue;
    INFO(e.path().string());
    CHECK_NOTHROW(load_profile(e.path()));
    ++count;
  }
  CHECK(count >= 15);
}

TEST_CASE("defaults match the documented schema") {
  const auto dir = tbtest::scratch("defaults");
  tbtest::write_text(dir / "p.yaml", "name: d\n");
  const profile p = load_profile(dir / "p.yaml").value;
  CHECK(p.device == "auto");
  CHECK(p.train.batch_size == 32);
  CHECK(p.train.optimizer.lr == Approx(0.001));
  CHECK(p.train.optimizer.momentum == Approx(0.9));
  CHECK(p.measure.warmup_batches == 5);
  CHECK(p.measure.measured_batches == 3);
  CHECK(p.data.normalize.mean == std::vector<double>{0.5, 0.5, 0.5});
  CHECK(p.transfer.depth == 2);
  CHECK_FALSE(grad_scaler_enabled(p.train));
}

TEST_CASE("extends merges maps key by key, child wins, lists are replaced") {
  const auto dir = tbtest::scratch("extends");
  tbtest::write_text(dir / "base.yaml",
                     "name: base\ndata: {workers: 2, pin_memory: true, normalize: {mean: [0.1, 0.2, 0.3]}}\n"
                     "train: {batch_size: 16, optimizer: {lr: 0.5, momentum: 0.8}}\n");
  tbtest::write_text(dir / "sub/mid.yaml", "extends: ../base.yaml\nname: mid\ntrain: {batch_size: 64}\n");
  tbtest::write_text(dir / "sub/leaf.yaml",
                     "extends: mid.yaml\nname: leaf\ndata: {normalize: {mean: [0.9, 0.9, 0.9]}}\n"
                     "train: {optimizer: {lr: 0.25}}\n");
  const auto lp = load_profile(dir / "sub/leaf.yaml");
  const profile& p = lp.value;
  CHECK(p.name == "leaf");
  CHECK(p.data.workers == 2);
  CHECK(p.data.pin_memory);
  CHECK(p.data.normalize.mean == std::vector<double>{0.9, 0.9, 0.9});
  CHECK(p.train.batch_size == 64);
  CHECK(p.train.optimizer.lr == Approx(0.25));
  CHECK(p.train.optimizer.momentum == Approx(0.8));
  CHECK(lp.chain.size() == 3);
}

TEST_CASE("an extends cycle is an error that names the chain") {
  const auto dir = tbtest::scratch("cycle");
  tbtest::write_text(dir / "a.yaml", "extends: b.yaml\nname: a\n");
  tbtest::write_text(dir / "b.yaml", "extends: a.yaml\nname: b\n");
  try {
    load_profile(dir / "a.yaml");
    FAIL("no error");
  } catch (const config_error& e) {
    CHECK(e.key() == "extends");
    CHECK(std::string(e.what()).find("cycle") != std::string::npos);
    CHECK(std::string(e.what()).find("b.yaml") != std::string::npos);
  }
}

TEST_CASE("set overrides win over the file and over extends, and are validated") {
  const auto dir = tbtest::scratch("set");
  tbtest::write_text(dir / "base.yaml", "name: base\ntrain: {batch_size: 16}\n");
  tbtest::write_text(dir / "p.yaml", "extends: base.yaml\ntrain: {batch_size: 32}\n");
  const profile p =
      load_profile(dir / "p.yaml", {"train.batch_size=8", "data.normalize.std=[0.2, 0.2, 0.2]", "train.amp=bf16"})
          .value;
  CHECK(p.train.batch_size == 8);
  CHECK(p.data.normalize.std == std::vector<double>{0.2, 0.2, 0.2});
  CHECK(p.train.amp == amp_mode::bf16);
  CHECK(load_profile(dir / "p.yaml", {"train.batch_size=4", "train.batch_size=2"}).value.train.batch_size == 2);
  try {
    load_profile(dir / "p.yaml", {"train.batch_size=0"});
    FAIL("no error");
  } catch (const config_error& e) {
    CHECK(e.key() == "train.batch_size");
    CHECK(e.where().find("--set") != std::string::npos);
  }
  CHECK_THROWS_AS(load_profile(dir / "p.yaml", {"novalue"}), config_error);
  CHECK_THROWS_AS(load_profile(dir / "p.yaml", {"train.bogus=1"}), config_error);
}

TEST_CASE("an error in a --set names the --set, also for an unknown block or a check after loading") {
  const auto dir = tbtest::scratch("set-origin");
  tbtest::write_text(dir / "p.yaml", "name: p\ntrain: {batch_size: 32}\n");
  for (const std::string set : {"train.optimiser.lr=0.1", "x.y=1", "data.normalise.mean=[0.5, 0.5, 0.5]"}) {
    INFO(set);
    try {
      load_profile(dir / "p.yaml", {set});
      FAIL("no error");
    } catch (const config_error& e) {
      CHECK(e.where() == "--set " + set);
    }
  }
  // Errors found after loading (the device, a batch size only a GPU can search) ask origin_of.
  const loaded_profile lp = load_profile(dir / "p.yaml", {"device=cuda:3", "train.optimizer.lr=0.5"});
  CHECK(origin_of(lp, "device") == "--set device=cuda:3");
  CHECK(origin_of(lp, "train.optimizer.lr") == "--set train.optimizer.lr=0.5");
  CHECK(origin_of(lp, "train.batch_size") == (dir / "p.yaml").string());
  CHECK(profile_and_sets(lp) == (dir / "p.yaml").string() + " with --set device=cuda:3, --set train.optimizer.lr=0.5");
  // On the command line: blamed on the --set, exit 2 (no host has a cuda:99).
  const auto r = tbtest::run_cli("run --config '" + (dir / "p.yaml").string() +
                                 "' --set device=cuda:99 --set data.source=device-synthetic");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("--set device=cuda:99: key 'device'") != std::string::npos);
}

TEST_CASE("errors point at file, line and column") {
  const auto dir = tbtest::scratch("where");
  tbtest::write_text(dir / "p.yaml", "name: x\ntrain:\n  batch_size: 8\n  optimizer: {lr: -1}\n");
  try {
    load_profile(dir / "p.yaml");
    FAIL("no error");
  } catch (const config_error& e) {
    CHECK(e.key() == "train.optimizer.lr");
    CHECK(e.where() == (dir / "p.yaml").string() + ":4:15");
  }
}

TEST_CASE("show output round-trips through load unchanged") {
  for (const char* rel :
       {"configs/quickstart.yaml", "configs/ladder/07-stream-overlap.yaml", "configs/ladder-plus/03-bf16.yaml"}) {
    INFO(rel);
    const profile p = load_profile(tbtest::source_dir() / rel).value;
    const auto dir = tbtest::scratch("roundtrip");
    tbtest::write_text(dir / "resolved.yaml", to_yaml(p));
    const profile q = load_profile(dir / "resolved.yaml").value;
    CHECK(to_yaml(q) == to_yaml(p));
    CHECK(profile_hash(q) == profile_hash(p));
  }
}

TEST_CASE("numbers in exponent form keep a '.' so YAML 1.1 readers (PyYAML) see floats, and round-trip") {
  profile p;
  p.train.optimizer.lr = 1e-5;
  p.measure.target_cv = 1e-12;
  p.dist.bucket_mb = 25;
  const std::string yaml = to_yaml(p);
  CHECK(yaml.find("lr: 1.0e-05") != std::string::npos);
  CHECK(yaml.find("target_cv: 1.0e-12") != std::string::npos);
  CHECK(yaml.find("bucket_mb: 25.0") != std::string::npos);
  const auto dir = tbtest::scratch("exponents");
  tbtest::write_text(dir / "p.yaml", yaml);
  const profile q = load_profile(dir / "p.yaml").value;
  CHECK(q.train.optimizer.lr == 1e-5);
  CHECK(q.measure.target_cv == 1e-12);
}

TEST_CASE("the profile hash changes with the work, the workload hash ignores names and counts") {
  const auto dir = tbtest::scratch("hash");
  tbtest::write_text(dir / "p.yaml", "name: x\n");
  const profile a = load_profile(dir / "p.yaml").value;
  const profile b = load_profile(dir / "p.yaml", {"measure.repeats=9", "report.path=elsewhere.json"}).value;
  const profile c = load_profile(dir / "p.yaml", {"train.batch_size=7"}).value;
  CHECK(profile_hash(a) != profile_hash(b));
  CHECK(workload_hash(a) == workload_hash(b));
  CHECK(workload_hash(a) != workload_hash(c));
}

TEST_CASE("batch_size accepts auto and the grad scaler follows amp") {
  const auto dir = tbtest::scratch("auto");
  tbtest::write_text(dir / "p.yaml", "name: x\ntrain: {batch_size: auto, amp: fp16}\n");
  const profile p = load_profile(dir / "p.yaml").value;
  CHECK(p.train.batch_size_auto);
  CHECK(grad_scaler_enabled(p.train));
  CHECK(to_yaml(p).find("batch_size: \"auto\"") != std::string::npos);
  // Enumerations are quoted so YAML 1.1 readers (PyYAML) do not turn off/on into booleans.
  CHECK(to_yaml(p).find("grad_scaler: \"auto\"") != std::string::npos);
}
