#pragma once
// Shared by the data-parallel tests: ranks started by hand on loopback, and trained weights.
#include <ATen/core/Tensor.h>

#include <filesystem>
#include <string>
#include <vector>

#include "helpers.hpp"

namespace tbtest {

// A port the kernel just handed out, so parallel test runs do not collide.
int free_port();
// torchrun's variables for one of `world` ranks on this machine (shell words, trailing space).
std::string rank_env(int rank, int world, int port);
// Rank 1 in the background, rank 0 in the foreground, each with its own arguments (shell words).
// The output ends with "rc0=<exit code> rc1=<exit code>".
cli_result two_ranks(const std::string& args0, const std::string& args1);
inline cli_result two_ranks(const std::string& args) { return two_ranks(args, args); }
// The project's Python (its torchrun).
std::string python();

std::vector<at::Tensor> parameters_of(const std::filesystem::path& weights);  // a resnet18 state dict
double max_relative_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);
bool identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b);

// Five measured steps at a learning rate that moves the weights visibly.
extern const std::string five_steps;

}  // namespace tbtest
