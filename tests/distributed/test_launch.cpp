#include <catch2/catch.hpp>
#include <map>

#include "trainbench/distributed/launch.hpp"
#include "trainbench/distributed/rank_merge.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;

namespace {
env_lookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}
}  // namespace

TEST_CASE("no launcher variables: one process on its own") {
  const launch_info l = read_launch(env_of({}));
  CHECK(l.launcher == "none");
  CHECK(l.world == 1);
  CHECK(l.rank == 0);
}

TEST_CASE("torchrun's variables, including its agent store") {
  const launch_info l = read_launch(env_of({{"RANK", "3"},
                                            {"WORLD_SIZE", "8"},
                                            {"LOCAL_RANK", "1"},
                                            {"LOCAL_WORLD_SIZE", "2"},
                                            {"MASTER_ADDR", "node7"},
                                            {"MASTER_PORT", "29400"},
                                            {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                            {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  CHECK(l.launcher == "torchrun");
  CHECK(l.rank == 3);
  CHECK(l.world == 8);
  CHECK(l.local_rank == 1);
  CHECK(l.local_world == 2);
  CHECK(l.master_addr == "node7");
  CHECK(l.master_port == 29400);
  CHECK(l.agent_store);
  CHECK(l.restart_count == "2");
}

TEST_CASE("torchrun wins over Slurm when both are present") {
  const launch_info l = read_launch(
      env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}));
  CHECK(l.launcher == "torchrun");
  CHECK(l.rank == 1);
  CHECK_FALSE(l.agent_store);
}

TEST_CASE("srun's variables, the rendezvous host taken from the node list") {
  const launch_info l = read_launch(env_of({{"SLURM_PROCID", "5"},
                                            {"SLURM_NTASKS", "8"},
                                            {"SLURM_LOCALID", "1"},
                                            {"SLURM_STEP_NUM_TASKS", "8"},
                                            {"SLURM_STEP_NUM_NODES", "2"},
                                            {"SLURM_JOB_NODELIST", "gpu[07-08]"}}));
  CHECK(l.launcher == "slurm");
  CHECK(l.rank == 5);
  CHECK(l.world == 8);
  CHECK(l.local_rank == 1);
  CHECK(l.local_world == 4);
  CHECK(l.master_addr == "gpu07");
  CHECK(l.master_port == 29500);
}

TEST_CASE("Slurm node lists: first host") {
  CHECK(first_slurm_host("gpu[07-09,12],cpu1") == "gpu07");
  CHECK(first_slurm_host("a1,a2") == "a1");
  CHECK(first_slurm_host("single") == "single");
  CHECK(first_slurm_host("n[3,5]") == "n3");
}

TEST_CASE("bad launcher values name the variable") {
  auto message = [](std::map<std::string, std::string> vars) {
    try {
      read_launch(env_of(std::move(vars)));
    } catch (const config_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}}), Catch::Contains("'RANK'"));
  CHECK_THAT(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}}),
             Catch::Contains("not below the world size 2"));
  CHECK_THAT(message({{"RANK", "0"}, {"MASTER_ADDR", "a"}}), Catch::Contains("'WORLD_SIZE'"));
  CHECK_THAT(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), Catch::Contains("'MASTER_ADDR'"));
  CHECK_THAT(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}}),
             Catch::Contains("'MASTER_PORT'"));
}

// GCC 12 at -O3 reports the std::optional<dist_result> below as maybe used uninitialized inside
// its own emplace() (a false positive that came with run_result's kernel_families member).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
TEST_CASE("merging ranks: samples summed, the slowest rank's time") {
  run_result r0;
  r0.dist.emplace();
  run_result r1;
  r0.windows = {{100, 1.0, 100.0}, {100, 2.0, 50.0}};
  r1.windows = {{100, 2.0, 50.0}, {100, 1.0, 100.0}};
  r0.stages_s["allreduce"] = {0.1, 0.3, 0.2};
  merge_ranks(r0, {pack_rank(r0, 2), pack_rank(r1, 2)});
  REQUIRE(r0.windows.size() == 2);
  CHECK(r0.windows[0].samples == 200);
  CHECK(r0.windows[0].elapsed_s == 2.0);
  CHECK(r0.windows[0].samples_per_s == Approx(100.0));
  CHECK(r0.windows[1].samples_per_s == Approx(100.0));
  REQUIRE(r0.dist->ranks.size() == 2);
  CHECK(r0.dist->ranks[0].allreduce_s_median == Approx(0.2));
  CHECK_FALSE(r0.dist->ranks[1].allreduce_s_median.has_value());
  CHECK(r0.dist->ranks[1].windows[0].samples_per_s == Approx(50.0));
}

TEST_CASE("merging ranks: a window one rank lacks is not reported") {
  run_result r0;
  r0.dist.emplace();
  run_result r1;
  r0.windows = {{100, 1.0, 100.0}, {100, 1.0, 100.0}};
  r1.windows = {{100, 1.0, 100.0}};
  merge_ranks(r0, {pack_rank(r0, 2), pack_rank(r1, 2)});
  CHECK(r0.windows.size() == 1);
}

TEST_CASE("a ladder's run under a launcher keys its rendezvous apart, and alone the prefix means nothing") {
  const launch_info l = read_launch(env_of(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {ladder_store_variable, "ladder/round_2/rung_0"}}));
  CHECK(l.store_prefix == "ladder/round_2/rung_0");
  CHECK(read_launch(env_of({{ladder_store_variable, "ladder/round_1/rung_0"}})).store_prefix.empty());
}
