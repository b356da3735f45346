// Built instead of gloo_backend.cpp when the Gloo headers were not found at configure time.
#include "trainbench/distributed/c10d_state.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

bool gloo_compiled_in() { return false; }

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                                    std::chrono::milliseconds, const gloo_choice&) {
  throw config_error("", "dist.backend",
                     "this build has no Gloo (its headers were not found at build time: install libgloo-dev "
                     "and reconfigure)");
}

}  // namespace trainbench
