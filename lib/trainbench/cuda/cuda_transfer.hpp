#pragma once
#include <c10/cuda/CUDAStream.h>

#include <optional>

namespace trainbench {

// Lets the CUDA clock record the h2d events on the stream the copies really run on.
class copy_lane {
 public:
  virtual ~copy_lane() = default;
  virtual std::optional<c10::cuda::CUDAStream> stream() const = 0;
};

}  // namespace trainbench
