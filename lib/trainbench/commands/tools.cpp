#include <algorithm>
#include <cstdio>
#include <filesystem>
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
namespace {

// README has the real CIFAR-10 unpacked where make-dataset writes by default: a folder with its
// files and no GENERATED marker is someone's data, never overwritten. A generated set is.
void refuse_real_cifar10(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec) || std::filesystem::exists(dir / "GENERATED", ec)) return;
  for (const char* name : {"data_batch_1.bin", "test_batch.bin", "batches.meta.txt"})
    if (std::filesystem::exists(dir / name, ec))
      throw input_error("make-dataset: '" + dir.string() + "' holds " + name +
                        " that make-dataset did not write (no GENERATED file): a real CIFAR-10 is never "
                        "overwritten; give a new folder");
}

}  // namespace

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

int make_dataset_command(const make_dataset_request& r) {
  if (r.kind == "imagefolder") {
    if (r.classes < 1) throw input_error("make-dataset: --classes must be >= 1, got " + std::to_string(r.classes));
    if (r.per_class < 1)
      throw input_error("make-dataset: --per-class must be >= 1, got " + std::to_string(r.per_class));
    // ImageNet has 1,000 classes and 1.3 million files: ten times that is far past any test set.
    constexpr long long max_files = 10'000'000;
    if (static_cast<long long>(r.classes) * r.per_class > max_files)
      throw input_error("make-dataset: --classes " + std::to_string(r.classes) + " x --per-class " +
                        std::to_string(r.per_class) + " is more than " + std::to_string(max_files) + " files");
    const generated_folder g = write_image_folder(r.out, r.classes, r.per_class, r.seed);
    std::printf(
        "wrote %lld dead-leaves JPEGs to %s: train/ %d classes x %d, val/ %d classes x %d (%d threads)\n"
        "  mean file %.1f KB, mean size %.0f x %.0f px (ImageNet: about 110 KB, 400 x 350); %lld grayscale, %lld "
        "progressive\n",
        static_cast<long long>(g.files), r.out.c_str(), r.classes, r.per_class, r.classes, g.val_per_class, g.threads,
        g.mean_bytes / 1000.0, g.mean_width, g.mean_height, static_cast<long long>(g.grayscale),
        static_cast<long long>(g.progressive));
    return exit_code::ok;
  }
  if (r.kind != "cifar10")
    throw input_error("make-dataset: unknown kind '" + r.kind + "'; allowed: cifar10, imagefolder");
  if (r.samples < 1) throw input_error("make-dataset: --samples must be >= 1, got " + std::to_string(r.samples));
  // A file's records are built in memory: 10 million samples (200 times CIFAR-10) is about 6 GB a file.
  constexpr long long max_samples = 10'000'000;
  if (r.samples > max_samples)
    throw input_error("make-dataset: --samples " + std::to_string(r.samples) + " would need " +
                      std::to_string(static_cast<long long>(static_cast<double>(r.samples) / 5 * 3073 / 1e9)) +
                      " GB per file in memory; at most " + std::to_string(max_samples));
  refuse_real_cifar10(r.out);
  write_cifar10(r.out, r.samples, std::max(1LL, r.samples / 5), r.seed);
  std::cout << "wrote a random CIFAR-10-format dataset (" << r.samples << " train samples) to " << r.out << "\n";
  return exit_code::ok;
}

}  // namespace trainbench
