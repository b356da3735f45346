#pragma once
// Entry points to everything that needs CUDA. With a CUDA LibTorch they are implemented in this
// folder; without one, a stub throws if they are ever reached (the CPU path never reaches them).
#include <memory>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/measure/clock.hpp"
#include "trainbench/measure/probe.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/stages/train_step.hpp"
#include "trainbench/stages/transfer.hpp"

namespace trainbench {

bool cuda_code_compiled();
std::string cuda_device_name(c10::Device device);

std::unique_ptr<transfer_stage> make_cuda_transfer(c10::Device device, const transfer_config& cfg, bool pinned);
// Times compute-stream stages with CUDA events and h2d on the transfer's copy stream if it has one.
std::unique_ptr<stage_clock> make_cuda_clock(c10::Device device, const transfer_stage* transfer);
std::unique_ptr<device_probe> make_cuda_probe(c10::Device device);
std::unique_ptr<train_step> make_graph_step(resnet18 model, const step_options& options,
                                            const std::vector<std::int64_t>& input_shape, bool channels_last);

struct cuda_versions {
  std::string runtime = "none", cudnn = "none", driver = "none";
};
cuda_versions cuda_library_versions();

}  // namespace trainbench
