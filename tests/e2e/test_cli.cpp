// The executable end to end: reports a user relies on, exit codes, interruption.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "helpers.hpp"

namespace fs = std::filesystem;

TEST_CASE("a tiny CPU run writes a report with the measured numbers") {
  const auto dir = tbtest::scratch("e2e-run");
  const auto r = tbtest::run_cli("--config '" + tbtest::tiny_profile(dir) + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("samples/s") != std::string::npos);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["schema_version"] == 1);
  CHECK(j["status"] == "ok");
  CHECK(j["error"].is_null());
  CHECK(j["tool"]["name"] == "trainbench");
  CHECK(j["profile"]["name"] == "tiny");
  CHECK(j["model"]["parameters"] == 11181642);
  REQUIRE(j["results"]["repeats"].size() == 2);
  for (const auto& w : j["results"]["repeats"]) {
    CHECK(w["samples"] == 8);  // 2 batches of 4
    CHECK(w["samples_per_s"].get<double>() == Approx(8.0 / w["elapsed_s"].get<double>()));
  }
  const double median = j["results"]["samples_per_s"]["median"];
  CHECK(median > 0);
  CHECK(j["results"]["samples_per_s"]["n"] == 2);
  CHECK(j["results"]["loss"]["first"].is_number());
  CHECK(j["results"]["loss"]["last"].is_number());
  for (const char* s : {"data_wait", "h2d", "forward", "backward", "optimizer", "batch"})
    CHECK(j["results"]["stages_s"][s]["median"].get<double>() >= 0);
  // On the CPU the stages run one after another inside the batch: they never overlap.
  CHECK(j["results"]["stages_overlap_s"]["median"].get<double>() <= 0);
  // The summary says how the stages' sum relates to the batch.
  const bool said = r.output.find("in the batch but in no stage") != std::string::npos ||
                    r.output.find("stages ran at the same time") != std::string::npos;
  CHECK(said);
  CHECK(j["effective"]["device"] == "cpu");
  CHECK(j["effective"]["notes"].empty());
  CHECK(j["context"]["libtorch"] == "2.11.0");
}

TEST_CASE("noise-based stopping: windows are added while noisy, up to measure.max_repeats") {
  const auto dir = tbtest::scratch("e2e-stopping");
  const auto file = tbtest::tiny_profile(dir);  // repeats: 2
  auto windows_and_reason = [&](const std::string& sets) {
    const auto r = tbtest::run_cli("run -q -c '" + file + "'" + sets);
    INFO(r.output);
    REQUIRE(r.code == 0);
    const auto j = tbtest::read_json(dir / "tiny.json");
    CHECK(tbtest::schema_errors(j).empty());
    return std::make_pair(j["results"]["repeats"].size(), j["results"]["stopped_by"].get<std::string>());
  };
  CHECK(windows_and_reason("") == std::make_pair(std::size_t{2}, std::string("repeats")));
  // Any two windows are within a cv of 100: quiet after the minimum.
  CHECK(windows_and_reason(" --set measure.max_repeats=6 --set measure.target_cv=100") ==
        std::make_pair(std::size_t{2}, std::string("target_cv")));
  // No two windows are within a cv of 1e-12: noisy up to the cap.
  CHECK(windows_and_reason(" --set measure.max_repeats=4 --set measure.target_cv=1e-12") ==
        std::make_pair(std::size_t{4}, std::string("max_repeats")));
  const auto bad = tbtest::run_cli("run -c '" + file + "' --set measure.max_repeats=1");
  CHECK(bad.code == 2);
  CHECK(bad.output.find("measure.max_repeats") != std::string::npos);
}

TEST_CASE("switches that cannot work on a CPU are reported as ineffective, not faked") {
  const auto dir = tbtest::scratch("e2e-notes");
  const auto file =
      tbtest::tiny_profile(dir, "transfer: {non_blocking: true, copy_stream: true}\nbackend: {cuda_graph: true}\n");
  const auto r = tbtest::run_cli("run --config '" + file + "' --set data.pin_memory=true");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK_FALSE(j["effective"]["cuda_graph"].get<bool>());
  CHECK_FALSE(j["effective"]["copy_stream"].get<bool>());
  CHECK_FALSE(j["effective"]["pin_memory"].get<bool>());
  std::string notes = j["effective"]["notes"].dump();
  for (const char* key : {"data.pin_memory", "transfer.non_blocking", "transfer.copy_stream", "backend.cuda_graph"})
    CHECK(notes.find(key) != std::string::npos);
}

TEST_CASE("show prints a resolved profile that run accepts unchanged") {
  const auto dir = tbtest::scratch("e2e-show");
  auto r = tbtest::run_cli("show --config '" + tbtest::tiny_profile(dir) + "' --set train.batch_size=2");
  REQUIRE(r.code == 0);
  CHECK(r.output.find("batch_size: 2") != std::string::npos);
  tbtest::write_text(dir / "resolved.yaml", r.output);
  r = tbtest::run_cli("validate '" + (dir / "resolved.yaml").string() + "'");
  CHECK(r.code == 0);
}

TEST_CASE("a failing run leaves a report with status error and exits 1") {
  const auto dir = tbtest::scratch("e2e-fail");
  // A valid profile whose batch buffers this machine cannot allocate: the run starts, then fails.
  const auto r = tbtest::run_cli_memory_limited("run --config '" + tbtest::tiny_profile(dir) + "'" +
                                                tbtest::too_big_for_this_machine);
  INFO(r.output);
  CHECK(r.code == 1);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["status"] == "error");
  CHECK(j["error"]["message"].get<std::string>().find("allocate") != std::string::npos);
  CHECK(j["error"]["message"].get<std::string>().find("frame #") == std::string::npos);  // no stack dump
  CHECK(j["results"]["repeats"].empty());
}

TEST_CASE("Ctrl-C leaves a valid report with status interrupted and exit 130") {
  const auto dir = tbtest::scratch("e2e-sigint");
  const auto profile = tbtest::tiny_profile(dir);
  const fs::path log = dir / "stderr.txt";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    (void)!freopen(log.c_str(), "w", stderr);
    (void)!freopen("/dev/null", "w", stdout);
    const std::string exe = tbtest::exe();
    execl(exe.c_str(), exe.c_str(), "run", "--config", profile.c_str(), "--set", "measure.measured_batches=100000",
          "--set", "measure.repeats=3", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until warmup is over, i.e. the run is inside its first measured window.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool measuring = false;
  while (!measuring && std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(log);
    std::stringstream ss;
    ss << in.rdbuf();
    measuring = ss.str().find("warmup: 1 batches done") != std::string::npos;
    if (!measuring) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(measuring);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["status"] == "interrupted");
  CHECK(j["error"]["kind"] == "interrupted");
  CHECK(j["results"]["warmup_batches_done"] == 1);
  CHECK(j["results"]["stopped_by"] == "interrupted");
}

TEST_CASE("bench-data measures the loader alone") {
  const auto dir = tbtest::scratch("e2e-bench-data");
  const auto r = tbtest::run_cli("bench-data --config '" + tbtest::tiny_profile(dir) +
                                 "' --set data.workers=1 --out '" + (dir / "data.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "data.json");
  CHECK(j["results"]["samples_per_s"]["median"].get<double>() > 0);
  CHECK(j["results"]["stages_s"].contains("data_wait"));
  CHECK_FALSE(j["results"]["stages_s"].contains("forward"));
  CHECK(j["model"]["parameters"] == 0);
  // The profile's windows are sized for a training step; a loader's get a floor.
  CHECK(j["measure"]["min_window_s"] == 0.1);
  CHECK(j["effective"]["notes"].dump().find("min_window_s 0 taken as 0.1 s") != std::string::npos);
}

TEST_CASE("make-dataset, then a cifar10 run reports generated data") {
  const auto dir = tbtest::scratch("e2e-cifar");
  auto r = tbtest::run_cli("make-dataset cifar10 --out '" + (dir / "cifar").string() + "' --samples 40");
  REQUIRE(r.code == 0);
  const auto file = tbtest::tiny_profile(dir);
  r = tbtest::run_cli("run --config '" + file + "' --set data.source=cifar10 --set data.path='" +
                      (dir / "cifar").string() + "' --set data.workers=2");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["context"]["data_generated"] == true);
  CHECK(j["effective"]["loader_workers"] == 2);
}

TEST_CASE("version and help") {
  auto r = tbtest::run_cli("--version");
  CHECK(r.code == 0);
  CHECK(r.output.find("LibTorch 2.11") != std::string::npos);
  CHECK(r.output.find("NVTX") != std::string::npos);
  CHECK(r.output.find("cuDNN") != std::string::npos);
  r = tbtest::run_cli("--help");
  CHECK(r.code == 0);
  for (const char* sub : {"run", "validate", "show", "compare", "ladder", "bench-data", "make-dataset"})
    CHECK(r.output.find(sub) != std::string::npos);
  CHECK(tbtest::run_cli("--no-such-flag").code == 2);
}

TEST_CASE("a missing dataset is an error, unless the profile asks for the synthetic fallback") {
  const auto dir = tbtest::scratch("e2e-fallback");
  const auto file = tbtest::tiny_profile(dir);
  const std::string missing = " --set data.source=fashion-mnist --set data.path='" + (dir / "nothing").string() + "'";
  auto r = tbtest::run_cli("run --config '" + file + "'" + missing);
  CHECK(r.code == 2);
  CHECK_FALSE(fs::exists(dir / "tiny.json"));
  r = tbtest::run_cli("run --config '" + file + "'" + missing + " --set data.fallback=synthetic");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["effective"]["dataset"].get<std::string>().find("synthetic") == 0);
  CHECK(j["effective"]["notes"].dump().find("data.fallback: synthetic") != std::string::npos);
}

TEST_CASE("bottleneck finds a loop whose loading outweighs its step input-bound, and keeps both reports") {
  const auto dir = tbtest::scratch("e2e-bottleneck");
  // Resizing 2896 px sources down to 16 px costs about twice a 16 px ResNet-18 step on 4 images:
  // the loop runs at about a third of its ceiling. At 1448 px (about 70%) a busy machine's noise
  // (cv 27% over 6 windows) once left the verdict AMBIGUOUS.
  const auto file = tbtest::tiny_profile(dir);
  const auto r = tbtest::run_cli("bottleneck -c '" + file + "' --out '" + (dir / "neck").string() +
                                 "' --rounds 3 --set data.source_size=2896 --set data.samples=16" +
                                 " --set measure.measured_batches=3");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("INPUT-BOUND") != std::string::npos);
  const auto verdict = tbtest::read_json(dir / "neck" / "bottleneck.json");
  CHECK(verdict["verdict"] == "INPUT-BOUND");
  CHECK(verdict["share_of_ceiling"].get<double>() < 0.9);
  CHECK(verdict["hints"].dump().find("data.workers: 0") != std::string::npos);
  const auto loop = tbtest::read_json(dir / "neck" / "loop.json");
  const auto ceiling = tbtest::read_json(dir / "neck" / "ceiling.json");
  for (const auto* rep : {&loop, &ceiling}) {
    CHECK(tbtest::schema_errors(*rep).empty());
    CHECK((*rep)["status"] == "ok");
    CHECK((*rep)["results"]["repeats"].size() == 6);  // 3 rounds of 2 windows
    CHECK((*rep)["measure"]["repeats"] == 6);
  }
  CHECK(loop["profile"]["name"] == "tiny");
  CHECK(ceiling["profile"]["name"] == "tiny-ceiling");
  CHECK(ceiling["effective"]["dataset"] == "device-synthetic");
  CHECK(ceiling["effective"]["batch_size"] == loop["effective"]["batch_size"]);
  CHECK(ceiling["effective"]["notes"].dump().find("interleaved with tiny") != std::string::npos);
}

TEST_CASE("Ctrl-C during bottleneck: both reports say interrupted, no verdict, exit 130") {
  const auto dir = tbtest::scratch("e2e-bottleneck-sigint");
  const auto file = tbtest::tiny_profile(dir);
  const std::string log = (dir / "log.txt").string();
  const auto r = tbtest::run_shell("\"$TB\" bottleneck -c '" + file + "' --out '" + (dir / "neck").string() +
                                   "' --rounds 1 --set measure.measured_batches=100000 > " + log +
                                   " 2>&1 & p=$!; i=0; until grep -q 'warmup:' " + log +
                                   " || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done; kill -INT $p; wait $p;"
                                   " echo rc=$?");
  INFO(r.output);
  CHECK(r.output.find("rc=130") != std::string::npos);
  const auto loop = tbtest::read_json(dir / "neck" / "loop.json");
  const auto ceiling = tbtest::read_json(dir / "neck" / "ceiling.json");
  CHECK(loop["status"] == "interrupted");
  CHECK(ceiling["status"] == "interrupted");  // it never ran: stopped with the loop
  CHECK(ceiling["error"]["message"].get<std::string>().find("stopped because tiny failed") != std::string::npos);
  CHECK(tbtest::schema_errors(loop).empty());
  CHECK(tbtest::schema_errors(ceiling).empty());
  CHECK_FALSE(fs::exists(dir / "neck" / "bottleneck.json"));
}

TEST_CASE("bottleneck refuses a profile with no input pipeline, and bad rounds, writing nothing") {
  const auto dir = tbtest::scratch("e2e-bottleneck-bad");
  const auto file = tbtest::tiny_profile(dir);
  auto r = tbtest::run_cli("bottleneck -c '" + file + "' --out '" + (dir / "neck").string() +
                           "' --set data.source=device-synthetic");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("--set data.source=device-synthetic: key 'data.source'") != std::string::npos);
  r = tbtest::run_cli("bottleneck -c '" + file + "' --out '" + (dir / "neck").string() + "' --rounds 0");
  CHECK(r.code == 2);
  CHECK(r.output.find("--rounds") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "neck"));
}

TEST_CASE("make-dataset never overwrites a CIFAR-10 it did not write, and rewrites one it did") {
  const auto dir = tbtest::scratch("e2e-make-over-real");
  tbtest::write_text(dir / "real/data_batch_1.bin", "the real thing");
  const auto refused = tbtest::run_cli("make-dataset cifar10 --out '" + (dir / "real").string() + "' --samples 5");
  INFO(refused.output);
  CHECK(refused.code == 2);
  CHECK_THAT(refused.output, Catch::Contains("data_batch_1.bin") && Catch::Contains("no GENERATED"));
  std::ifstream in(dir / "real/data_batch_1.bin");
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == "the real thing");
  CHECK_FALSE(fs::exists(dir / "real/test_batch.bin"));
  for (int i = 0; i < 2; ++i) {  // a generated set is regenerated in place
    const auto made = tbtest::run_cli("make-dataset cifar10 --out '" + (dir / "made").string() + "' --samples 5");
    INFO(made.output);
    CHECK(made.code == 0);
  }
}

TEST_CASE("make-dataset refuses a sample count no machine can hold, before writing anything") {
  const auto dir = tbtest::scratch("e2e-make-huge");
  for (const char* n : {"9223372036854775807", "100000000", "0", "-5"}) {
    const auto r = tbtest::run_cli("make-dataset cifar10 --out '" + (dir / "cifar").string() + "' --samples " + n);
    INFO(n << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK_THAT(r.output, Catch::Contains("--samples"));
    CHECK_FALSE(fs::exists(dir / "cifar"));
  }
  const auto r = tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "jpegs").string() +
                                 "' --classes 100000 --per-class 1000");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("--per-class 1000"));
  CHECK_FALSE(fs::exists(dir / "jpegs"));
}

TEST_CASE("fusion-bench needs a CUDA device: exit 2 naming the key and no file written, and so is --rounds 0") {
  const auto dir = tbtest::scratch("fusion_bench_cli");
  const std::string profile = tbtest::tiny_profile(dir);
  const auto out = dir / "fusion.json";
  const tbtest::cli_result cpu = tbtest::run_cli("fusion-bench -c " + profile + " -o " + out.string());
  CHECK(cpu.code == 2);
  CHECK(cpu.output.find("key 'device'") != std::string::npos);
  CHECK(cpu.output.find("needs a CUDA device; 'cpu' is cpu here") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out));
  const tbtest::cli_result rounds = tbtest::run_cli("fusion-bench -c " + profile + " --rounds 0");
  CHECK(rounds.code == 2);
  CHECK(rounds.output.find("--rounds and --calls must be at least 1") != std::string::npos);
}
