#pragma once
// Profiles measured in fresh processes (no torch here: the runs are children). Each process is a
// `trainbench run` that pools its windows with the earlier processes of its profile through a
// state file, so the report keeps every window with the process it came from; several profiles
// are interleaved process by process (all once, then all again, ...), so a drift of the machine
// falls on all of them alike. `run --processes N` and the ladder's rounds are this one mechanism.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "trainbench/util/child_process.hpp"

namespace trainbench {

struct process_series {
  std::string file, stem;  // the profile, and the name its console lines use
  std::filesystem::path report, state;
  std::string refused;  // why a process refused it (exit 2): it is not run again
  std::string crashed;  // how a process ended without writing its report (a signal, an exit code)
  int done = 0;         // processes finished and pooled
  bool failed = false;
};

struct fresh_process_request {
  std::string command = "run";  // or "bench-data"
  int processes = 1;
  bool shuffle = false;  // a new random order of the profiles for every process round
  std::uint64_t shuffle_seed = 1;
  std::vector<std::string> child_arguments;  // after `run --config FILE`: --set, --strict, ...
  bool quiet = false;
  bool summary_last_only = false;  // only the last round's processes print their (pooled) summary
};

struct fresh_process_outcome {
  int code = 0;  // exit_code::ok, or failed when a series failed
  bool interrupted = false;
};

// Runs every series' processes, interleaved, after removing an earlier run's reports (rank 0) and
// state files (every rank its own: rank_state_file). A series whose process fails is not run again; one
// whose process died without writing its report (a signal: the OOM killer, a crash in a CUDA
// teardown) keeps the earlier processes' report, marked as failed and naming how. Under
// torchrun or srun every rank runs the same processes in the same order, and rank 0 alone writes
// reports. An interruption or an error of its own marks every unfinished report before it returns
// (interrupted) or throws.
fresh_process_outcome run_fresh_processes(std::vector<process_series>& series, const fresh_process_request& req);

// The state file one rank's processes pool through: `state` alone, or under a launcher
// <stem>.rank<r><extension> beside it ({rank} in the stem replaced too), one per rank.
std::filesystem::path rank_state_file(const std::filesystem::path& state, int rank, int world);

// The file one of several fresh processes writes for an output path (a trace, saved weights), so
// that none overwrites another's: {process} becomes `process` (1, 2, ...); without it,
// "-process<k>" goes before the extension (trace.json: trace-process2.json). `process` 0 (the
// only process) or an empty path: the path as given.
std::string process_file(const std::string& path, int process);

// How a child ended, for a report and the console ("was killed by signal 9 (Killed)", "ended
// with exit code 1").
std::string describe_exit(const child_exit& e);

// After a failed process: marks `report` as failed when it holds fewer processes than
// `expected` (the child never wrote its own), naming how the child ended. Returns whether it did.
bool mark_crashed(const std::filesystem::path& report, int expected, int planned, const child_exit& e);

}  // namespace trainbench
