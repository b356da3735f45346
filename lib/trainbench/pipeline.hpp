#pragma once
// Assembles the stages a profile asks for on the device at hand, and records what really runs.
#include "trainbench/config/profile.hpp"
#include "trainbench/distributed/launch.hpp"
#include "trainbench/measure/runner.hpp"
#include "trainbench/report/run_result.hpp"

namespace trainbench {

struct build_options {
  bool strict = false;      // requested-but-ineffective switches become errors
  bool with_step = true;    // false: loader and transfer only (bench-data)
  launch_info launch;       // this process's place in a data-parallel job (launcher "none": alone)
  // data.source: device-synthetic: make the batch in the dtype data.decode: device writes (the
  // autocast dtype under train.amp), as the batches of the loop it stands for (bottleneck's
  // ceiling of a loop whose decode ran on the device).
  bool synthetic_as_decoded = false;
};

// Resolves device: auto | cpu | cuda | cuda:N. Throws config_error when CUDA is asked for but absent.
c10::Device resolve_device(const std::string& text);
bool cuda_runtime_available();

pipeline build_pipeline(const profile& p, const build_options& options, effective_settings& effective,
                        std::int64_t& parameters);

}  // namespace trainbench
