#pragma once
// What each subcommand does, so the executable only wires the command line to these.
#include <cstdint>
#include <string>
#include <vector>

namespace trainbench {

struct run_request {
  std::vector<std::string> configs;  // several: each in fresh processes, interleaved
  std::vector<std::string> sets;
  int processes = 0;         // fresh processes per profile; 0: the profile's measure.processes
  std::string out;           // overrides report.path
  std::string baseline;      // a world-size-1 report: scaling efficiency of a data-parallel run
  std::string save_weights;  // state dict after the run ({rank} is replaced)
  std::string trace;         // overrides measure.trace
  bool quiet = false;
  bool strict = false;
  bool data_only = false;  // bench-data: loader and transfer, no model
  std::string pool_state;  // ladder rounds: pool with the rounds recorded in this file, and add this one
  int process = 0;         // which of several fresh processes this is (1, 2, ...): see process_file; 0: the only one
  std::string command_line;
};

// bottleneck: the profile against the same step on one reused device batch, interleaved in one
// process; prints whether the loop is input-bound and writes both reports and the verdict.
struct bottleneck_request {
  std::string config;
  std::vector<std::string> sets;
  std::string out;  // folder; default reports/bottleneck/<profile name>
  int rounds = 3;
  double threshold_pct = 3.0;
  double alpha = 0.05;
  std::string trace;  // the loop's trace; the ceiling's beside it (-ceiling before the extension)
  bool quiet = false;
  std::string command_line;
};

// logits (not listed in --help): the profile's model (model.arch, model.weights, ...) in eval
// mode, fp32 on the CPU, on an N x 3 x H x W tensor saved by torch.save; writes the logits
// (torch.load-able) to `out` and prints {arch, parameters, input_shape,
// forward_flops_per_sample, logits} as one JSON line. The torchvision cross-check runs it.
struct logits_request {
  std::string config;
  std::vector<std::string> sets;
  std::string input, out;
};

// ladder: the rungs (a folder of profiles, or profile files) in rounds, each rung and round a
// fresh `run` process, then the table (ladder.md) and chart (ladder.svg) of the pooled windows.
struct ladder_request {
  std::vector<std::string> inputs;
  std::string out;  // default reports/<the first input's folder name>
  std::vector<std::string> sets;
  int rounds = 5;        // fresh processes per rung: 5 against 5 reach p < 0.05 at the process level
  bool shuffle = false;  // a new random rung order in every round (random interleaving)
  std::uint64_t shuffle_seed = 1;
  std::string reference;  // rung samples/s to mark in ladder.svg (else the profiles' header comments)
  bool quiet = false;
  std::string command_line;
};

// fusion-bench: NVIDIA's MLPerf convolution fusions against what backend.compile runs, for every
// "batch norm, ReLU, convolution" pair of the profile's model, per shape, on its CUDA device.
struct fusion_bench_request {
  std::string config;
  std::vector<std::string> sets;
  std::string out;  // JSON; none: the table only
  int rounds = 5;   // alternating rounds of both sides per shape
  int calls = 10;   // calls per side and round, between two CUDA events
  bool autotune = false;  // time every plan of the fused graphs first, as cudnn.benchmark does for convolutions
};
int fusion_bench_command(const fusion_bench_request& request);

int run_command(const run_request& request);
// run / bench-data with several profiles or processes: each process a fresh child of this one.
int run_processes_command(const run_request& request);
int ladder_command(const ladder_request& request);
int bottleneck_command(const bottleneck_request& request);
int validate_command(const std::vector<std::string>& files);
int show_command(const std::string& config, const std::vector<std::string>& sets);
struct make_dataset_request {
  std::string kind, out;
  long long samples = 50000;  // cifar10
  int classes = 10;           // imagefolder
  int per_class = 100;        // imagefolder
  unsigned long long seed = 0;
};
int make_dataset_command(const make_dataset_request& request);
int logits_command(const logits_request& request);
std::string version_text();

}  // namespace trainbench
