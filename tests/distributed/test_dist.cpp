// Data-parallel runs over Gloo on loopback: ranks are real processes started by the test (and
// once by the real torchrun of the project's PyTorch).
#include <ATen/ATen.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <set>
#include <thread>

#include "distributed/dist_helpers.hpp"
#include "helpers.hpp"
#include "trace_checks.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/distributed/c10d_state.hpp"
#include "trainbench/distributed/host_address.hpp"
#include "trainbench/distributed/ladder_store.hpp"
#include "trainbench/distributed/process_group.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/pipeline.hpp"
#include "trainbench/stages/weights.hpp"

using namespace trainbench;
using namespace tbtest;
namespace fs = std::filesystem;

namespace {

// Both ranks measure "forever"; once rank 0 has warmed up, rank 1 gets `signal`. The output ends
// with "rc0=<rank 0's exit code> ms=<from the signal to rank 0's exit>".
tbtest::cli_result disturb_rank1(const fs::path& dir, const std::string& config, const std::string& signal) {
  const int port = free_port();
  const std::string args = " --config " + config + " --set measure.measured_batches=100000";
  const std::string log0 = (dir / "rank0.log").string();
  return tbtest::run_shell(
      rank_env(1, 2, port) + "\"$TB\"" + args + " > /dev/null 2>&1 & p1=$!; " + rank_env(0, 2, port) + "\"$TB\"" +
      args + " > " + log0 + " 2>&1 & p0=$!; " + "i=0; until grep -q 'warmup:' " + log0 +
      " || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done; kill -" + signal +
      " $p1; start=$(date +%s%N); wait $p0; echo rc0=$? ms=$(( ($(date +%s%N) - start) / 1000000 )); "
      "kill -9 $p1 2>/dev/null; true");
}

// Where a rank of this machine runs: its host name and the address Gloo binds to here.
rank_host here() { return {this_host_name(), choose_gloo_devices(process_environment()).addresses.at(0)}; }

double seconds_in(const std::string& output) { return std::stoi(output.substr(output.find("ms=") + 3)) / 1000.0; }

constexpr const char* dist_extra = "dist: {backend: gloo, timeout_s: 20}\n";

// One process, one global batch of 2 x 4 per step, split the way the ranks split it (rank r
// reads positions r, r + 2, ...). Batch norm normalises per rank in data-parallel training (as
// DDP without SyncBatchNorm does), so the reference runs each rank's half as a micro-batch and
// accumulates: the same gradient as the all-reduced average.
std::vector<at::Tensor> reference_after_five_steps(const std::string& config) {
  profile p = load_profile(config, {"train.batch_size=8", "train.grad_accumulation=2", "dist.backend=none",
                                    "train.optimizer.lr=0.05"})
                  .value;
  effective_settings e;
  std::int64_t parameters = 0;
  pipeline pipe = build_pipeline(p, build_options{}, e, parameters);
  for (int step = 0; step < 5; ++step) {
    pipe.transfer->submit(pipe.loader->next(), *pipe.loader);
    device_batch global = pipe.transfer->take();
    for (int r = 0; r < 2; ++r) {
      at::Tensor rows = at::arange(r, 8, 2);
      device_batch half{global.images.index_select(0, rows), global.labels.index_select(0, rows), 0, 4};
      pipe.step->forward(half);
      pipe.step->backward();
      pipe.step->optimizer_step();
    }
    pipe.transfer->step_done();
  }
  return pipe.step->model()->parameters();
}

}  // namespace

TEST_CASE("two ranks over Gloo hold identical parameters, equal to one process on the global batch") {
  const auto dir = tbtest::scratch("dist-two-ranks");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const auto r = two_ranks(" --config " + config + five_steps + " --out " + (dir / "r{rank}.json").string() +
                           " --save-weights " + (dir / "w{rank}.pt").string());
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));

  const auto w0 = parameters_of(dir / "w0.pt"), w1 = parameters_of(dir / "w1.pt");
  CHECK(identical(w0, w1));
  const auto reference = reference_after_five_steps(config);
  const auto initial = [&] {
    at::manual_seed(1);
    return make_resnet("resnet18", 10)->parameters();
  }();
  CHECK(max_relative_difference(reference, initial) > 1e-3);  // training moved the weights
  CHECK(max_relative_difference(w0, reference) < 1e-4);

  const auto report = tbtest::read_json(dir / "r0.json");
  const auto& d = report["results"]["distributed"];
  CHECK(report["status"] == "ok");
  CHECK(d["world_size"] == 2);
  CHECK(d["backend"] == "gloo");
  CHECK(d["global_batch_size"] == 8);
  // DDP's buckets for this model at bucket_cap_mb 25, once rebuilt after the first step (torch
  // 2.11, from DistributedDataParallel._get_ddp_logging_data()["rebuilt_bucket_sizes"]).
  CHECK(d["bucket_bytes"] == nlohmann::json::array({28872744, 15853824}));
  CHECK(d["ranks"].size() == 2);
  CHECK(report["results"]["repeats"][0]["samples"] == 40);  // 5 steps x 4 samples x 2 ranks
  CHECK(report["results"]["stages_s"].contains("allreduce"));
  CHECK(fs::exists(dir / "r1.json"));
  CHECK(tbtest::schema_errors(report).empty());
}

TEST_CASE("gradient accumulation all-reduces only on the step that applies it") {
  const auto dir = tbtest::scratch("dist-accumulate");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const auto r = two_ranks(" --config " + config + five_steps + " --set train.grad_accumulation=2 --out " +
                           (dir / "r{rank}.json").string());
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));
  const auto report = tbtest::read_json(dir / "r0.json");
  // 5 micro-batches with k = 2: the all-reduce ran after the 2nd and the 4th only.
  CHECK(report["results"]["distributed"]["allreduce_steps"] == 2);
  CHECK(report["results"]["distributed"]["allreduce_span_s_median"].is_number());
}

TEST_CASE("noise-based stopping across two ranks: every rank stops after the same window") {
  const auto dir = tbtest::scratch("dist-stopping");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  // A target no pair of windows meets: every rank keeps asking for more, up to the cap.
  const auto r = two_ranks(" --config " + config + " --set measure.max_repeats=3 --set measure.target_cv=1e-12" +
                           " --out " + (dir / "r{rank}.json").string());
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));
  for (const char* file : {"r0.json", "r1.json"}) {
    const auto report = tbtest::read_json(dir / file);
    CHECK(report["results"]["repeats"].size() == 3);
    CHECK(report["results"]["stopped_by"] == "max_repeats");
  }
}

TEST_CASE("a rank that never arrives fails the others within the timeout, naming it") {
  const auto dir = tbtest::scratch("dist-missing");
  const std::string config = tbtest::tiny_profile(dir, "dist: {backend: gloo, timeout_s: 2}\n");
  const auto start = std::chrono::steady_clock::now();
  const auto r = tbtest::run_shell(rank_env(0, 2, free_port()) + "\"$TB\" --config " + config);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.output);
  CHECK(r.code == 1);
  CHECK(seconds < 30);
  const auto report = tbtest::read_json(dir / "tiny.json");
  CHECK(report["status"] == "error");
  CHECK(report["error"]["kind"] == "dist");
  CHECK_THAT(report["error"]["message"].get<std::string>(), Catch::Contains("rank(s) 1 of 2 did not arrive"));
}

TEST_CASE("a killed rank makes the other fail cleanly and name it") {
  const auto dir = tbtest::scratch("dist-killed");
  const std::string config = tbtest::tiny_profile(dir, "dist: {backend: gloo, timeout_s: 3}\n");
  const auto r = disturb_rank1(dir, config, "9");  // SIGKILL in the middle of the measured batches
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=1"));
  CHECK(seconds_in(r.output) < 30);
  const auto report = tbtest::read_json(dir / "tiny.json");
  CHECK(report["status"] == "error");
  CHECK(report["error"]["kind"] == "dist");
  // The survivor names the lost rank and its host (all ranks posted theirs at the rendezvous).
  CHECK_THAT(report["error"]["message"].get<std::string>(),
             Catch::Contains(rank_at(1, {here(), here()}) + " did not report the failure"));
  CHECK(tbtest::schema_errors(report).empty());
}

TEST_CASE("a launcher without dist.backend is refused, and dist.backend without a launcher runs alone") {
  const auto dir = tbtest::scratch("dist-mismatch");
  const std::string config = tbtest::tiny_profile(dir);
  const auto refused = tbtest::run_shell(rank_env(1, 2, 29400) + "\"$TB\" --config " + config);
  CHECK(refused.code == 2);
  CHECK_THAT(refused.output, Catch::Contains("dist.backend") && Catch::Contains("rank 1 of 2"));
  CHECK_FALSE(fs::exists(dir / "tiny.json"));

  const auto alone = tbtest::run_cli("--config " + config + " --set dist.backend=gloo -q");
  REQUIRE(alone.code == 0);
  const auto report = tbtest::read_json(dir / "tiny.json");
  CHECK(report["results"]["distributed"].is_null());
  CHECK_THAT(report["effective"]["notes"].dump(), Catch::Contains("dist.backend: requested but ineffective"));
  CHECK(tbtest::run_cli("--config " + config + " --set dist.backend=gloo --strict -q").code == 2);

  const auto nccl_on_cpu =
      tbtest::run_shell(rank_env(0, 1, free_port()) + "\"$TB\" --config " + config + " --set dist.backend=nccl");
  CHECK(nccl_on_cpu.code == 2);
  CHECK_THAT(nccl_on_cpu.output, Catch::Contains("'nccl' needs a CUDA device"));
}

TEST_CASE("torchrun starts two ranks, with scaling efficiency against a one-process baseline") {
  const auto dir = tbtest::scratch("dist-torchrun");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const std::string base = (dir / "base.json").string();
  REQUIRE(tbtest::run_cli("--config " + config + " --set dist.backend=none -q --out " + base).code == 0);
  const auto mismatch = tbtest::run_cli("--config " + config + " --set train.batch_size=2 -q --baseline " + base);
  CHECK(mismatch.code == 2);
  CHECK_THAT(mismatch.output, Catch::Contains("different workload"));

  const auto r = tbtest::run_shell("'" + python() + "' -m torch.distributed.run --nproc-per-node 2 --master-port " +
                                   std::to_string(free_port()) + " --no-python \"$TB\" --config " + config +
                                   " -q --baseline " + base + " --save-weights " + (dir / "w{rank}.pt").string());
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto report = tbtest::read_json(dir / "tiny.json");
  const auto& d = report["results"]["distributed"];
  CHECK(d["launcher"] == "torchrun");
  CHECK(d["world_size"] == 2);
  CHECK(d["scaling_efficiency"].get<double>() > 0);
  CHECK(d["baseline_report"] == base);
  CHECK(identical(parameters_of(dir / "w0.pt"), parameters_of(dir / "w1.pt")));
}

// Every rank runs every process; only the rank that writes a report pools, through a state
// file of its own: 3 processes are 3, not each round once per rank.
TEST_CASE("torchrun with run --processes 3: the report holds exactly 3 processes") {
  const auto dir = tbtest::scratch("dist-torchrun-processes");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const auto r = tbtest::run_shell("'" + python() + "' -m torch.distributed.run --nproc-per-node 2 --master-port " +
                                   std::to_string(free_port()) + " --no-python \"$TB\" run --config " + config +
                                   " -q --processes 3 --set measure.repeats=1 --out '" +
                                   (dir / "r{rank}.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  for (const char* rank : {"0", "1"}) {
    INFO("rank " << rank);
    const auto report = tbtest::read_json(dir / ("r" + std::string(rank) + ".json"));
    CHECK(report["measure"]["processes"] == 3);
    CHECK(report["results"]["processes"]["count"] == 3);
    CHECK(report["results"]["distributed"]["world_size"] == 2);
    std::multiset<int> processes;
    for (const auto& w : report["results"]["repeats"]) processes.insert(w["process"].get<int>());
    CHECK(processes == std::multiset<int>{0, 1, 2});  // one (merged) window from each process
    CHECK(fs::exists(dir / "processes" / ("r" + std::string(rank) + ".rank" + rank + ".json")));
  }
}

TEST_CASE("ranks given different profiles refuse to run") {
  const auto dir = tbtest::scratch("dist-different");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const auto r = two_ranks(" --config " + config, " --config " + config + " --set train.optimizer.lr=0.5");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("rc0=2") && Catch::Contains("rc1=2"));
  const std::string rank0 = r.output.substr(0, r.output.find("--- rank 1:"));
  CHECK_THAT(rank0, Catch::Contains("rank 1 runs a different profile"));
}

TEST_CASE("a ladder under two ranks: one group per rung, rank 0 writes the table") {
  const auto dir = tbtest::scratch("dist-ladder");
  const std::string first = tbtest::tiny_profile(dir / "rungs", dist_extra);
  fs::rename(first, dir / "rungs/1-tiny.yaml");
  tbtest::write_text(dir / "rungs/2-batch.yaml", "extends: 1-tiny.yaml\nname: tiny-batch\ntrain: {batch_size: 8}\n");
  const auto r = two_ranks(" ladder " + (dir / "rungs").string() + " --quiet --out " + (dir / "out").string() +
                           " --set measure.repeats=1");
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));
  CHECK(fs::exists(dir / "out/ladder.md"));
  for (const char* rung : {"1-tiny", "2-batch"}) {
    const auto report = tbtest::read_json(dir / "out" / (std::string(rung) + ".json"));
    CHECK(report["results"]["distributed"]["world_size"] == 2);
  }
}

// The stress suite once saw rank 1 of a ladder exit 1 after every run went well: rank 0 had
// closed the store while rank 1 still read the last agreement.
TEST_CASE("a ladder's rank 0 serves the store until every rank is done with it") {
  launch_info l0;
  l0.launcher = "torchrun";
  l0.world = 2;
  l0.master_addr = "127.0.0.1";
  l0.master_port = free_port();
  launch_info l1 = l0;
  l1.rank = l1.local_rank = 1;
  std::atomic<bool> rank0_done{false};
  std::string rank0_error;
  std::thread rank0([&] {
    try {
      ladder_store store(l0);
      store.agree("last", 0);
      store.finish(false);
    } catch (const std::exception& e) {
      rank0_error = e.what();
    }
    rank0_done = true;
  });
  std::vector<int> agreed;
  std::string rank1_error;
  bool rank0_left_early = false;
  try {
    ladder_store store(l1);
    agreed = store.agree("last", 0);
    // Rank 0 is past its last agreement; give it time to leave, were it to leave early.
    for (int i = 0; i < 30 && !rank0_done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    rank0_left_early = rank0_done;
    store.finish(false);
  } catch (const std::exception& e) {
    rank1_error = e.what();
  }
  rank0.join();
  CHECK(rank0_error.empty());
  CHECK(rank1_error.empty());
  CHECK(agreed == std::vector<int>{0, 0});
  CHECK_FALSE(rank0_left_early);
  CHECK(rank0_done);
}

// A peer ladder that is gone ends the wait as soon as its heartbeat has stood still, not after
// the 5 minutes the ranks otherwise give each other.
TEST_CASE("a ladder rank whose peer is gone stops waiting when the heartbeat says so") {
  launch_info l0;
  l0.launcher = "torchrun";
  l0.world = 2;
  l0.master_addr = "127.0.0.1";
  l0.master_port = free_port();
  launch_info l1 = l0;
  l1.rank = l1.local_rank = 1;
  ladder_store_bounds bounds;
  bounds.wait = std::chrono::seconds(600);
  bounds.heartbeat_lost_after = std::chrono::seconds(2);
  std::unique_ptr<ladder_store> rank1;
  std::thread start1([&] { rank1 = std::make_unique<ladder_store>(l1, bounds); });
  ladder_store rank0(l0, bounds);
  start1.join();
  REQUIRE(rank1);
  rank1.reset();  // rank 1's ladder is gone before its first agreement
  const auto started = std::chrono::steady_clock::now();
  std::string error;
  try {
    rank0.agree("round_1/series_0", 0);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(error);
  // The heartbeat's verdict (on a machine so loaded that the watch itself stalled, it blames the
  // store rather than rank 1; either way the watch ended the wait).
  CHECK_THAT(error, Catch::Contains("rank 1 sent no heartbeat for 2 s") || Catch::Contains("did not answer for 2 s"));
  CHECK(waited < 600);  // the heartbeat ended it, not the wait's bound
}

TEST_CASE("a store call blocked on a dead link returns to its caller within the bound") {
  auto release = std::make_shared<std::promise<void>>();
  std::shared_future<void> released = release->get_future().share();
  // Stands in for a c10d call that waits on a link that is down.
  CHECK_FALSE(call_within([released] { released.wait(); }, std::chrono::milliseconds(50)));
  release->set_value();
  CHECK(call_within([] {}, std::chrono::seconds(60)));
  CHECK_THROWS_WITH(call_within([] { throw std::runtime_error("refused"); }, std::chrono::seconds(60)), "refused");

  launch_info l;
  l.launcher = "torchrun";
  l.master_addr = "127.0.0.1";
  l.master_port = free_port();
  const auto store = open_tcp_store(l, std::chrono::seconds(30));
  store->set("here", std::vector<std::uint8_t>{1});
  CHECK(wait_for_keys(store, {"here"}, std::chrono::steady_clock::now() + std::chrono::seconds(60),
                      std::chrono::seconds(30)) == key_wait::ready);
  CHECK(wait_for_keys(store, {"here", "never"}, std::chrono::steady_clock::now() + std::chrono::milliseconds(20),
                      std::chrono::seconds(30)) == key_wait::timed_out);
}

TEST_CASE("srun's environment: ranks from SLURM_PROCID, the store on the node list's first host") {
  const auto dir = tbtest::scratch("dist-slurm");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const int port = free_port();
  auto slurm_env = [&](int rank) {
    return "SLURM_PROCID=" + std::to_string(rank) + " SLURM_LOCALID=" + std::to_string(rank) +
           " SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 SLURM_STEP_NUM_NODES=1 SLURM_STEP_NODELIST=127.0.0.1 MASTER_PORT=" +
           std::to_string(port) + " ";
  };
  const std::string args = " --config " + config + " --set measure.repeats=1";
  const auto r = tbtest::run_shell(slurm_env(1) + "\"$TB\"" + args + " > /dev/null 2>&1 & " + slurm_env(0) + "\"$TB\"" +
                                   args + "; echo rc0=$?; wait $!; echo rc1=$?");
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));
  CHECK_THAT(r.output, Catch::Contains("2 x gloo (slurm)"));
  const auto report = tbtest::read_json(dir / "tiny.json");
  CHECK(report["results"]["distributed"]["launcher"] == "slurm");
  CHECK(report["results"]["distributed"]["local_world_size"] == 2);
}

TEST_CASE("fp16 with loss scaling across two ranks: the same steps skipped, identical parameters") {
  const auto dir = tbtest::scratch("dist-fp16");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const auto r = two_ranks(" --config " + config + five_steps + " --set train.amp=fp16 --out " +
                           (dir / "r{rank}.json").string() + " --save-weights " + (dir / "w{rank}.pt").string());
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));
  const auto r0 = tbtest::read_json(dir / "r0.json"), r1 = tbtest::read_json(dir / "r1.json");
  CHECK(r0["effective"]["grad_scaler"] == true);
  CHECK(r0["results"]["amp"]["skipped_steps"] == r1["results"]["amp"]["skipped_steps"]);
  CHECK(r0["results"]["amp"]["loss_scale"] == r1["results"]["amp"]["loss_scale"]);
  CHECK(identical(parameters_of(dir / "w0.pt"), parameters_of(dir / "w1.pt")));
}

TEST_CASE("a rank that hangs makes the other fail after dist.timeout_s, naming it") {
  const auto dir = tbtest::scratch("dist-hung");
  const std::string config = tbtest::tiny_profile(dir, "dist: {backend: gloo, timeout_s: 3}\n");
  // SIGSTOP, not a kill: rank 1's connections stay open, so only the timeout can tell.
  const auto r = disturb_rank1(dir, config, "STOP");
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=1"));
  // The bound on time, not Gloo's wording (which varies with timing): rank 0's collective fails
  // no earlier than the timeout after rank 1 last took part, and then rank 0 waits a further
  // min(timeout, 5 s) for rank 1 to report, so at least 3 s pass after the signal; a hang
  // would never end (the test would time out).
  CHECK(seconds_in(r.output) >= 3.0);
  CHECK(seconds_in(r.output) < 60);
  const auto report = tbtest::read_json(dir / "tiny.json");
  CHECK(report["status"] == "error");
  CHECK(report["error"]["kind"] == "dist");
  CHECK_THAT(report["error"]["message"].get<std::string>(),
             Catch::StartsWith("rank 0 of 2 (host ") && Catch::Contains(" failed: ") &&
                 Catch::Contains(rank_at(1, {here(), here()}) + " did not report the failure within 3 s"));
}

TEST_CASE("two ranks with --trace '{rank}': one trace per rank, each its own process with the all-reduce") {
  const auto dir = tbtest::scratch("dist-trace");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const std::string trace = (dir / "trace-{rank}.json").string();
  const auto r =
      two_ranks(" --config " + config + five_steps + " --out " + (dir / "r{rank}.json").string() + " --trace " + trace);
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path file = dir / ("trace-" + std::to_string(rank) + ".json");
    REQUIRE(fs::exists(file));
    const auto f = tbtest::check_trace(tbtest::read_json(file));
    for (const auto& e : f.errors) FAIL_CHECK(e);
    CHECK(f.pids == std::vector<int>{rank});
    CHECK(f.stage_n.count("allreduce"));
  }
}

TEST_CASE("ResNet-50 over two ranks gets DDP's own buckets at 25 MB") {
  const auto dir = tbtest::scratch("dist-resnet50");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  const auto r = two_ranks(" --config " + config + " --set model.arch=resnet50" + five_steps +
                           " --set measure.measured_batches=1 --out " + (dir / "r{rank}.json").string());
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=0") && Catch::Contains("rc1=0"));
  const auto report = tbtest::read_json(dir / "r0.json");
  // torch 2.11's DistributedDataParallel(torchvision resnet50(num_classes=10), bucket_cap_mb=25)
  // on two Gloo ranks: _get_ddp_logging_data()["rebuilt_bucket_sizes"] after the first steps.
  CHECK(report["results"]["distributed"]["bucket_bytes"] ==
        nlohmann::json::array({31584296, 26255360, 26550272, 9724160}));
  CHECK(report["model"]["arch"] == "resnet50");
}

TEST_CASE("a rank whose run fails after measuring still hands in its windows, and rank 0 names its error") {
  const auto dir = tbtest::scratch("dist-rank1-fails");
  const std::string config = tbtest::tiny_profile(dir, dist_extra);
  // Rank 1's weights cannot be written on its "node": a file size limit lets the checks at the
  // start (one byte) through but not the weights (SIGXFSZ ignored: the write fails with EFBIG).
  const int port = free_port();
  const std::string args = " --config " + config + five_steps + " --out " + (dir / "r0.json").string() +
                           " --save-weights " + (dir / "w{rank}.pt").string();
  const auto r = tbtest::run_shell("(trap '' XFSZ; ulimit -f 1000; " + rank_env(1, 2, port) + "exec \"$TB\"" + args +
                                   " > " + (dir / "rank1.log").string() + " 2>&1) & " + rank_env(0, 2, port) + "\"$TB\"" +
                                   args + "; echo rc0=$?; wait $!; echo rc1=$?");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("rc0=1") && Catch::Contains("rc1=1"));
  CHECK(fs::exists(dir / "w0.pt"));
  const auto report = tbtest::read_json(dir / "r0.json");
  CHECK(report["status"] == "error");
  CHECK(report["error"]["kind"] == "dist");
  // Rank 1's own error, not the gather's.
  CHECK_THAT(report["error"]["message"].get<std::string>(),
             Catch::StartsWith(rank_at(1, {here(), here()}) + " failed: ") && Catch::Contains("w1.pt"));
  // Both ranks' windows: 5 steps x 4 samples x 2 ranks.
  const auto& d = report["results"]["distributed"];
  CHECK(d["ranks_in_results"] == 2);
  CHECK(report["results"]["repeats"][0]["samples"] == 40);
  CHECK(tbtest::schema_errors(report).empty());
}

namespace {

// `world` ranks on loopback measuring "forever"; once rank 0 has warmed up, rank 1 gets SIGKILL.
// The output ends with "rc0=<rank 0's exit code>".
tbtest::cli_result kill_rank1_of(int world, const fs::path& dir, const std::string& config) {
  const int port = free_port();
  const std::string args = " --config " + config + " --set measure.measured_batches=100000";
  const std::string log0 = (dir / "rank0.log").string();
  std::string script;
  for (int r = world - 1; r >= 1; --r)
    script += rank_env(r, world, port) + "\"$TB\"" + args + " > /dev/null 2>&1 & p" + std::to_string(r) + "=$!; ";
  script += rank_env(0, world, port) + "\"$TB\"" + args + " > " + log0 + " 2>&1 & p0=$!; ";
  script += "i=0; until grep -q 'warmup:' " + log0 + " || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done; ";
  script += "kill -9 $p1; wait $p0; echo rc0=$?; ";
  for (int r = 2; r < world; ++r) script += "wait $p" + std::to_string(r) + "; echo rc" + std::to_string(r) + "=$?; ";
  return tbtest::run_shell(script);
}

}  // namespace

TEST_CASE("four ranks, one killed: rank 0 names it alone, not the healthy ranks still waiting on it") {
  const auto dir = tbtest::scratch("dist-four-killed");
  // A ring all-reduce fails at once only on the killed rank's neighbours; the others wait in it
  // until they learn of the failure. The heartbeat's window and the timeout are far longer than
  // anything here takes, so neither decides.
  const std::string config =
      tbtest::tiny_profile(dir, "dist: {backend: gloo, timeout_s: 120, heartbeat_timeout_s: 120}\n");
  const auto r = kill_rank1_of(4, dir, config);
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("rc0=1") && Catch::Contains("rc2=1") && Catch::Contains("rc3=1"));
  const auto report = tbtest::read_json(dir / "tiny.json");
  CHECK(report["status"] == "error");
  const std::vector<rank_host> hosts(4, here());
  const std::string message = report["error"]["message"].get<std::string>();
  CHECK_THAT(message, Catch::Contains("; " + rank_at(1, hosts) + " did not report the failure"));
  CHECK_THAT(message, !Catch::Contains(rank_at(2, hosts) + " did not") && !Catch::Contains(rank_at(3, hosts) + " did not") &&
                          !Catch::Contains(rank_at(2, hosts) + ", ") && !Catch::Contains(rank_at(3, hosts) + ", "));
  // The run failed before the ranks could gather: the results are rank 0's, and say so.
  CHECK(report["results"]["distributed"]["ranks_in_results"] == 1);
  CHECK_THAT(report["effective"]["notes"].dump(), Catch::Contains("could not be gathered"));
}

TEST_CASE("SIGTERM ends a rank blocked on a stopped peer at once: exit 130 and an interrupted report") {
  const auto dir = tbtest::scratch("dist-sigterm-blocked");
  // Neither the heartbeat nor the timeout may end the wait first.
  const std::string config =
      tbtest::tiny_profile(dir, "dist: {backend: gloo, timeout_s: 600, heartbeat_timeout_s: 300}\n");
  const int port = free_port();
  const std::string args = " --config " + config + " --set measure.measured_batches=100000";
  const std::string log0 = (dir / "rank0.log").string();
  // Rank 1 stopped; rank 0 gets SIGTERM once every one of its threads sleeps (it waits on rank 1).
  const auto r = tbtest::run_shell(
      rank_env(1, 2, port) + "\"$TB\"" + args + " > /dev/null 2>&1 & p1=$!; " + rank_env(0, 2, port) + "\"$TB\"" +
      args + " > " + log0 + " 2>&1 & p0=$!; i=0; until grep -q 'warmup:' " + log0 +
      " || [ $i -ge 600 ]; do sleep 0.1; i=$((i+1)); done; kill -STOP $p1; "
      "i=0; until ! cat /proc/$p0/task/*/stat | sed 's/.*) //' | cut -d' ' -f1 | grep -qv '^S$' || [ $i -ge 300 ]; "
      "do sleep 0.1; "
      "i=$((i+1)); done; kill -TERM $p0; start=$(date +%s%N); wait $p0; echo rc0=$? ms=$(( ($(date +%s%N) - start) / "
      "1000000 )); kill -9 $p1; true");
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("rc0=130"));
  CHECK(seconds_in(r.output) < 120);  // far below the heartbeat's 300 s and the timeout's 600 s
  const auto report = tbtest::read_json(dir / "tiny.json");
  CHECK(report["status"] == "interrupted");
  CHECK(report["results"]["distributed"]["ranks_in_results"] == 1);
  CHECK(tbtest::schema_errors(report).empty());
}

TEST_CASE("a dist.timeout_s below a second is refused: rounded to 0 ms, c10d would wait forever") {
  const auto dir = tbtest::scratch("dist-tiny-timeout");
  const std::string config = tbtest::tiny_profile(dir, "dist: {backend: gloo, timeout_s: 0.0004}\n");
  // `timeout` ends a rank 0 that waits for rank 1 forever, with 124.
  const auto r = tbtest::run_shell("timeout 60 env " + rank_env(0, 2, free_port()) + "\"$TB\" --config " + config);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("dist.timeout_s") && Catch::Contains("0.0004"));
  CHECK_FALSE(fs::exists(dir / "tiny.json"));
}

TEST_CASE("a ladder under two ranks whose rank 0 cannot write its reports: every rank skips the same rungs") {
  const auto dir = tbtest::scratch("dist-ladder-full");
  const std::string first =
      tbtest::tiny_profile(dir / "rungs", "dist: {backend: gloo, timeout_s: 60, heartbeat_timeout_s: 60}\n");
  fs::rename(first, dir / "rungs/1-tiny.yaml");
  tbtest::write_text(dir / "rungs/2-batch.yaml", "extends: 1-tiny.yaml\nname: tiny-batch\ntrain: {batch_size: 8}\n");
  // Rank 0's "disk" takes the one-byte write checks before anything runs, not a report (a file
  // size limit, SIGXFSZ ignored: writes fail with EFBIG). Rank 0 alone writes reports, so only
  // its runs fail; rank 1's succeed. Had rank 1 gone on to the rungs' second round alone, each
  // of its runs would wait dist.timeout_s for rank 0.
  const int port = free_port();
  const std::string args =
      " ladder " + (dir / "rungs").string() + " --quiet --rounds 2 --out " + (dir / "out").string();
  const auto r = tbtest::run_shell(rank_env(1, 2, port) + "\"$TB\"" + args + " > " + (dir / "rank1.log").string() +
                                   " 2>&1 & p1=$!; (trap '' XFSZ; ulimit -f 4; " + rank_env(0, 2, port) + "exec \"$TB\"" +
                                   args + "); echo rc0=$?; start=$(date +%s%N); wait $p1; echo rc1=$? ms=$(( ($(date "
                                   "+%s%N) - start) / 1000000 ))");
  INFO(r.output);
  CHECK_THAT(r.output, Catch::Contains("rc0=1") && Catch::Contains("rc1=1"));
  // Rank 1 did not wait for rank 0 in a rung rank 0 skipped. A full disk is the run's failure
  // (exit 1), not bad input (exit 2), and rank 1 fails with it.
  CHECK(seconds_in(r.output) < 60);
}

// The NCCL path calls the same shutdown() (ProcessGroupNCCL's destroys its communicators; without
// it, its destructor warns that destroy_process_group() was not called): its [gpu] test checks
// the warning is gone. Here, one Gloo rank in this process.
TEST_CASE("a process group shuts its backend down once, and refuses collectives after it") {
  launch_info l;
  l.launcher = "torchrun";
  l.master_addr = "127.0.0.1";
  l.master_port = free_port();
  dist_config d;
  d.backend = dist_backend::gloo;
  d.timeout_s = 30;
  d.heartbeat_timeout_s = 0;  // one rank: nobody to watch
  process_group g(l, d, c10::kCPU);
  CHECK(g.all_gather({1.0, 2.0}) == std::vector<std::vector<double>>{{1.0, 2.0}});
  CHECK_FALSE(g.shut_down());
  g.shutdown();
  CHECK(g.shut_down());
  CHECK_NOTHROW(g.shutdown());  // once only: a second call does nothing
  CHECK_THROWS_WITH(g.barrier(), Catch::Contains("after the process group was shut down"));
  CHECK_THROWS_WITH(g.all_gather({1.0}), Catch::Contains("after the process group was shut down"));
}
