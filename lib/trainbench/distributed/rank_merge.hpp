#pragma once
// Turning every rank's own measurements into the job's (no torch: plain numbers).
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/report/run_result.hpp"

namespace trainbench {

// One rank's figures as a flat list of numbers, the same length on every rank of a profile.
std::vector<double> pack_rank(const run_result& r, int repeats);

// Rank 0's result becomes the job's: each window's samples summed over ranks, divided by the
// slowest rank's elapsed time (windows start together, after a barrier). Per-rank figures are
// kept. A rank that failed may have packed fewer windows: the job's windows are those every rank
// completed.
void merge_ranks(run_result& rank0, const std::vector<std::vector<double>>& packed);

// samples/s median of a world-size-1 report of the same per-rank workload as `p`; throws
// input_error, naming the keys that differ when the workload does.
double baseline_rate(const std::string& report_path, const profile& p);

}  // namespace trainbench
