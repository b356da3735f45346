#pragma once
// The notes a run of a ladder profile must give on this GPU: with backend.compile,
// fuse_batch_norm's ineffective fusions and refused shapes (not built for this device and dtype),
// with backend.conv_fusion fuse_convolutions' unfused shapes, as the pipeline words them, asked of cuDNN here on a
// model of the profile's architecture at `batch`; in bf16, where some batch norm is left to PyTorch, the note that
// PyTorch runs bf16 batch norms on other kernels than fp16 ones, when it does. Defined in test_gpu.cpp; needs a CUDA
// device.
#include <cstdint>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"

namespace tbgpu {
std::vector<std::string> expected_notes(const trainbench::profile& p, std::int64_t batch);
}
