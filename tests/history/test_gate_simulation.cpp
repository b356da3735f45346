// A fixed-seed simulation of the gate's and compare's promises under run-to-run noise: a CI run
// (one job, one machine, one time) shares one level, and its processes share it. The figures it
// prints are the ones docs/history.md quotes. Fast (a few seconds on a loaded 2-core machine): no
// database, no report files; the statistics the gate and compare call, on constructed windows.
#include <catch2/catch.hpp>
#include <cmath>
#include <iostream>
#include <random>

#include "trainbench/report/compare.hpp"
#include "trainbench/report/verdict.hpp"

using namespace trainbench;
using nlohmann::json;

namespace {

// CI's noise, on the log scale: a run's level moves by run_sd (the machine's hour), a process's
// by process_sd around it, a window's by window_sd around its process.
struct noise_model {
  double run_sd = 0.03, process_sd = 0.02, window_sd = 0.003;
};

struct run_windows {
  std::vector<double> rates;
  std::vector<int> process;
};

run_windows make_run(std::mt19937_64& rng, const noise_model& m, double level, int processes, int windows) {
  std::normal_distribution<double> z(0.0, 1.0);
  run_windows r;
  const double run = m.run_sd * z(rng);
  for (int p = 0; p < processes; ++p) {
    const double proc = run + m.process_sd * z(rng);
    for (int w = 0; w < windows; ++w) {
      r.rates.push_back(level * std::exp(proc + m.window_sd * z(rng)));
      r.process.push_back(p);
    }
  }
  return r;
}

// The gate's row: baseline runs against candidate runs, at the run level.
pair_row gate_row(const std::vector<run_windows>& base, const std::vector<run_windows>& candidate) {
  pair_row row;
  row.level = evidence_level::run;
  int next = 0;
  const auto add = [&next](const std::vector<run_windows>& runs, std::vector<double>& rates, std::vector<int>& proc,
                           std::vector<int>& run) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      for (std::size_t w = 0; w < runs[i].rates.size(); ++w) {
        rates.push_back(runs[i].rates[w]);
        proc.push_back(next + runs[i].process[w]);
        run.push_back(static_cast<int>(i));
      }
      next += 100;
    }
  };
  add(base, row.base, row.base_process, row.base_run);
  add(candidate, row.candidate, row.candidate_process, row.candidate_run);
  return row;
}

struct gate_figures {
  int trials = 0, slower = 0, faster = 0;
};

// 40 main runs of 5 processes x 3 windows, the candidate one such run `change` slower; the process
// sd drawn per series from 0.5% to 5%.
gate_figures simulate_gate(std::uint64_t seed, int trials, double change, double run_sd, int baseline_runs = 40,
                           int candidate_runs = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> process_sd(0.005, 0.05);
  gate_figures f;
  f.trials = trials;
  for (int t = 0; t < trials; ++t) {
    noise_model m;
    m.run_sd = run_sd;
    m.process_sd = process_sd(rng);
    std::vector<run_windows> base, cand;
    for (int i = 0; i < baseline_runs; ++i) base.push_back(make_run(rng, m, 1000, 5, 3));
    for (int i = 0; i < candidate_runs; ++i) cand.push_back(make_run(rng, m, 1000 * (1 - change), 5, 3));
    const pair_row r = judge(gate_row(base, cand), 3.0, 0.05);
    f.slower += r.result == verdict::slower;
    f.faster += r.result == verdict::faster;
  }
  return f;
}

// One report of a run of `processes` fresh processes, each measuring from `start` on, one after another.
json report_of(const run_windows& r, double start, const std::string& name = "cpu-01-batch-32") {
  json repeats = json::array(), per_process = json::array();
  int processes = 0;
  for (std::size_t i = 0; i < r.rates.size(); ++i) {
    repeats.push_back({{"samples", 100}, {"elapsed_s", 100 / r.rates[i]}, {"samples_per_s", r.rates[i]},
                       {"process", r.process[i]}});
    processes = std::max(processes, r.process[i] + 1);
  }
  for (int p = 0; p < processes; ++p)
    per_process.push_back({{"measured_from_unix_s", start + 10.0 * p}, {"measured_to_unix_s", start + 10.0 * p + 5}});
  return {{"schema_version", 1},
          {"status", "ok"},
          {"profile", {{"name", name}, {"hash", "h"}, {"resolved", "name: x\ntrain:\n  batch_size: 32\n"}}},
          {"context", {{"gpu", nullptr}, {"libtorch", "2.11.0"}, {"build_type", "Release"}}},
          {"results", {{"repeats", repeats}, {"processes", {{"per_process", per_process}}}}}};
}

}  // namespace

TEST_CASE("simulation, fixed seed: the gate keeps alpha/2 under 3% run-to-run noise and catches a 12% slowdown",
          "[history][simulation]") {
  // A/A: 2000 gates, each against its own 40 baseline runs.
  const gate_figures aa = simulate_gate(20261205, 2000, 0.0, 0.03);
  // The same at 1% and 6% run-to-run sd: the run level adapts, the process level could not.
  const gate_figures aa_quiet = simulate_gate(20261206, 1000, 0.0, 0.01);
  const gate_figures aa_loud = simulate_gate(20261207, 1000, 0.0, 0.06);
  // Power: 12% slower, one candidate run, and two reruns of it.
  const gate_figures slow = simulate_gate(20261208, 1000, 0.12, 0.03);
  const gate_figures slow_reruns = simulate_gate(20261209, 1000, 0.12, 0.03, 40, 3);
  std::cout << "gate simulation: A/A at run sd 3%: " << aa.slower << " of " << aa.trials << " SLOWER, " << aa.faster
            << " FASTER; at 1%: " << aa_quiet.slower << " of " << aa_quiet.trials << " SLOWER; at 6%: "
            << aa_loud.slower << " of " << aa_loud.trials << " SLOWER; 12% slower: " << slow.slower << " of "
            << slow.trials << " SLOWER (3 candidate runs: " << slow_reruns.slower << " of " << slow_reruns.trials
            << ")\n";
  CHECK(aa.slower <= aa.trials * 0.025);
  CHECK(aa_quiet.slower <= aa_quiet.trials * 0.025 + 10);  // within Monte Carlo error of 2.5% (sd 0.5%)
  CHECK(aa_loud.slower <= aa_loud.trials * 0.025 + 10);
  CHECK(slow.slower >= slow.trials * 0.8);
  CHECK(slow_reruns.slower >= slow.slower);
}

TEST_CASE("simulation, fixed seed: compare of sequential 5-process runs never rests on their processes",
          "[history][simulation]") {
  std::mt19937_64 rng(20261210);
  noise_model m;
  m.run_sd = 0.03;
  m.process_sd = 0.02;
  // Six runs of 5 processes x 3 windows of one unchanged profile, one after another: 15 pairs.
  int decided = 0, decided_process_level = 0, pairs = 0;
  for (int series = 0; series < 20; ++series) {
    std::vector<json> runs;
    for (int i = 0; i < 6; ++i) runs.push_back(report_of(make_run(rng, m, 1000, 5, 3), 1.0e9 + 1000.0 * i));
    for (int a = 0; a < 6; ++a)
      for (int b = a + 1; b < 6; ++b) {
        const comparison c = compare_reports({runs[a]}, {runs[b]}, compare_options{});
        REQUIRE(c.rows.size() == 1);
        const pair_row& r = c.rows[0];
        ++pairs;
        decided += r.result == verdict::faster || r.result == verdict::slower;
        CHECK(r.arrangement == "apart");
        // What the process level would have said: the pair's 10 processes as independent.
        pair_row p = r;
        p.level = evidence_level::process;
        const pair_row q = judge(p, 3.0, 0.05);
        decided_process_level += q.result == verdict::faster || q.result == verdict::slower;
      }
  }
  std::cout << "compare simulation: " << pairs << " pairs of sequential 5-process runs (20 series of 15): " << decided
            << " FASTER or SLOWER (the process level alone: " << decided_process_level << ")\n";
  CHECK(decided == 0);
  const comparison one = compare_reports({report_of(make_run(rng, m, 1000, 5, 3), 1.0e9)},
                                         {report_of(make_run(rng, m, 1000, 5, 3), 1.0e9 + 1000)}, compare_options{});
  CHECK(one.rows[0].reason.find("the process level cannot decide it") != std::string::npos);
  CHECK(one.rows[0].reason.find("interleave") != std::string::npos);

  // Several runs a side, alternating (A B A B ...): the runs count. A/A stays within alpha/2;
  // a 12% slowdown is caught.
  int aa_slower = 0, slow_slower = 0;
  const int trials = 300;
  for (int t = 0; t < trials; ++t) {
    for (double change : {0.0, 0.12}) {
      std::vector<json> base, cand;
      for (int i = 0; i < 6; ++i) {
        base.push_back(report_of(make_run(rng, m, 1000, 5, 3), 1.0e9 + 2000.0 * i));
        cand.push_back(report_of(make_run(rng, m, 1000 * (1 - change), 5, 3), 1.0e9 + 2000.0 * i + 1000));
      }
      const comparison c = compare_reports(base, cand, compare_options{});
      REQUIRE(c.rows.size() == 1);
      CHECK(c.rows[0].arrangement == "runs");
      CHECK(c.rows[0].level == evidence_level::run);
      (change == 0 ? aa_slower : slow_slower) += c.rows[0].result == verdict::slower;
    }
  }
  std::cout << "compare simulation: 6 alternating runs a side: A/A " << aa_slower << " of " << trials
            << " SLOWER, 12% slower " << slow_slower << " of " << trials << " SLOWER\n";
  CHECK(aa_slower <= trials * 0.025 + 5);  // 2.5% within Monte Carlo error (sd 0.9%)
  CHECK(slow_slower >= trials * 0.8);
}
