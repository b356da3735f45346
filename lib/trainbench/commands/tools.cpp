#include <algorithm>
#include <iostream>

#include "trainbench/commands/commands.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/data/dataset.hpp"
#include "trainbench/measure/nvtx.hpp"
#include "trainbench/report/report.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/torch_compat.hpp"

namespace trainbench {

std::string version_text() {
  const cuda_versions v = cuda_library_versions();
  std::string text = "trainbench " + tool_version() + " (" + tool_git() + ")\n";
  text += std::string("LibTorch ") + compat::libtorch_version() + "\n";
  text += "CUDA " + std::string(cuda_code_compiled() ? "code compiled in" : "code not compiled") + "; runtime " +
          v.runtime + ", driver " + v.driver + ", cuDNN " + v.cudnn + "\n";
  text += nvtx_compiled_in() ? "NVTX: compiled in (domain 'trainbench')\n"
                             : "NVTX: compiled out (no NVTX3 headers found at build time)\n";
  return text;
}

int validate_command(const std::vector<std::string>& files) {
  int failures = 0;
  for (const auto& f : files) {
    const auto errors = profile_errors(f);
    for (const auto& e : errors) std::cout << e.what() << "\n";
    if (errors.empty()) std::cout << f << ": ok\n";
    failures += errors.empty() ? 0 : 1;
  }
  return failures ? exit_code::bad_input : exit_code::ok;
}

int show_command(const std::string& config, const std::vector<std::string>& sets) {
  std::cout << to_yaml(load_profile(config, sets).value);
  return exit_code::ok;
}

int make_dataset_command(const std::string& kind, const std::string& out, long long samples, unsigned long long seed) {
  if (kind != "cifar10") throw input_error("make-dataset: unknown kind '" + kind + "'; allowed: cifar10");
  if (samples < 1) throw input_error("make-dataset: --samples must be >= 1");
  write_cifar10(out, samples, std::max(1LL, samples / 5), seed);
  std::cout << "wrote a random CIFAR-10-format dataset (" << samples << " train samples) to " << out << "\n";
  return exit_code::ok;
}

}  // namespace trainbench
