#pragma once
#include <ATen/core/Tensor.h>

namespace trainbench {

// A batch where the step reads it: on the device (or the host tensors themselves on a CPU run).
struct device_batch {
  at::Tensor images;
  at::Tensor labels;
  std::int64_t index = -1;
  std::int64_t count = 0;
};

}  // namespace trainbench
