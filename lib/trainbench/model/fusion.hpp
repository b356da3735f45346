#pragma once
// backend.compile's model half: batch norm with ReLU, and batch norm with the residual add and
// ReLU, each run as one op forward and backward. The step asks for it once, when the pipeline is
// built; the model then runs the chosen ops and never branches on the switch again.
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/model/resnet.hpp"

namespace trainbench {

struct fusion_request {
  c10::Device device = c10::kCPU;
  amp_mode amp = amp_mode::off;
  bool channels_last = false;
  std::vector<std::int64_t> input_shape;  // N, C, H, W of every batch the model will see
};

struct fusion_outcome {
  std::vector<std::string> applied;      // what runs fused, for the report's `effective`
  std::vector<std::string> ineffective;  // "<fusion>: <why it cannot run here>", for its notes
};

// Switches the model's batch norms (with their ReLU, and with the residual add) to fused ops
// where this device and dtype have them. Where a fusion cannot run, the model keeps the unfused
// ops and `ineffective` says why.
fusion_outcome fuse_batch_norm(resnet& model, const fusion_request& request);

}  // namespace trainbench
