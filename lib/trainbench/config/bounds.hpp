#pragma once
// Upper bounds on profile values. A value no machine can serve (data.image_size: 100000 asks for
// terabytes) is bad input: refused at load, with what it would need, before anything is allocated.
// Every size the rest of the code derives from the profile stays far inside 64 bits under them.
#include <cstdint>
#include <optional>
#include <string>

#include "trainbench/config/profile.hpp"

namespace trainbench {

struct bound_violation {
  std::string key;
  std::string message;  // the value, what it would need, and the bound
};

// The first value past its bound: per-key maxima, finiteness of every number, file-name
// lengths, then the host memory the values imply together.
std::optional<bound_violation> check_bounds(const profile& p);

// Batch buffers in the loader's ring (the loader allocates exactly this many).
inline std::int64_t loader_slot_count(int workers, int prefetch_factor) {
  const std::int64_t n = static_cast<std::int64_t>(prefetch_factor) * (workers > 1 ? workers : 1);
  return n > 2 ? n : 2;
}

// The largest host memory the loader's buffers and a synthetic dataset may take together.
constexpr double max_host_bytes = 1024.0 * 1024 * 1024 * 1024;  // 1 TiB

}  // namespace trainbench
