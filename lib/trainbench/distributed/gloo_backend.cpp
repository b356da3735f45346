// ProcessGroupGloo.hpp needs the Gloo headers, which the PyTorch wheel does not ship. This file
// compiles against Debian's (libgloo-dev) for declarations only: it calls functions that
// LibTorch exports (createDefaultDevice, the constructor) and never instantiates anything of
// Gloo's, so the layout of the wheel's own Gloo is the only one that runs. A test checks that
// this object file defines no Gloo symbol.
#include <c10/util/env.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "trainbench/distributed/c10d_state.hpp"

namespace trainbench {

bool gloo_compiled_in() { return true; }

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // A group built from C++ gets no device by default; pick one the way torch.distributed does.
  const auto ifnames = c10::utils::get_env("GLOO_SOCKET_IFNAME");
  if (ifnames && !ifnames->empty()) {
    std::size_t start = 0;
    while (start <= ifnames->size()) {
      const std::size_t comma = std::min(ifnames->find(',', start), ifnames->size());
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifnames->substr(start, comma - start)));
      start = comma + 1;
    }
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
}

}  // namespace trainbench
