#pragma once
// The notes a run of a backend.compile profile must give on this GPU: fuse_batch_norm's
// ineffective fusions and refused shapes (not built for this device and dtype), as the pipeline
// words them. Asked of cuDNN here, on a model of the profile's architecture at `batch`; empty for
// a profile without backend.compile. Defined in test_gpu.cpp; needs a CUDA device.
#include <cstdint>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"

namespace tbgpu {
std::vector<std::string> compile_notes(const trainbench::profile& p, std::int64_t batch);
}
