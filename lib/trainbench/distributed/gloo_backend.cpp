// ProcessGroupGloo.hpp needs the Gloo headers, which the PyTorch wheel does not ship. This file
// compiles against Debian's (libgloo-dev) for declarations only: it calls functions that
// LibTorch exports (createDeviceForHostname, createDeviceForInterface, the constructor) and never instantiates anything
// of Gloo's, so the layout of the wheel's own Gloo is the only one that runs. A test checks that this object file
// defines no Gloo symbol.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "trainbench/distributed/c10d_state.hpp"

namespace trainbench {

bool gloo_compiled_in() { return true; }

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                    std::chrono::milliseconds timeout, const gloo_choice& devices) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  // A group built from C++ gets no device by default. choose_gloo_devices picked them the way
  // torch.distributed does (GLOO_SOCKET_IFNAME, else the host name's address, else loopback);
  // an address passed as the host name binds exactly there.
  if (!devices.interfaces.empty())
    for (const auto& name : devices.interfaces)
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
  else
    for (const auto& address : devices.addresses)
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(address));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
}

}  // namespace trainbench
