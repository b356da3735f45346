// Profiles that only a GPU host runs, checked on the CPU: the ones the [gpu] tests write. A
// profile that no longer loads (a key written twice, a renamed key) fails here in CI, not first
// on a GPU host.
#include <catch2/catch.hpp>
#include <filesystem>

#include "gpu/gpu_profiles.hpp"
#include "helpers.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

// Every profile text the [gpu] tests write, with a name for the failure message.
std::vector<std::pair<std::string, std::string>> gpu_test_profiles(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& v : tbgpu::pipeline_variants())
    out.push_back(
        {std::string("pipeline_profile(") + v.data + ", " + v.extra + ")", tbgpu::pipeline_profile(v.data, v.extra)});
  out.push_back({"auto_seed_profile", tbgpu::auto_seed_profile()});
  out.push_back({"second_device_profile", tbgpu::second_device_profile()});
  for (const auto& t : tbgpu::transfer_index_variants())
    out.push_back({"transfer_index_profile(" + t + ")", tbgpu::transfer_index_profile(t)});
  out.push_back({"decode_bench_profile", tbgpu::decode_bench_profile((dir / "folder").string())});
  out.push_back({"trace_profile", tbgpu::trace_profile((dir / "r.json").string())});
  return out;
}

}  // namespace

TEST_CASE("every profile a [gpu] test writes loads on the CPU") {
  const auto dir = tbtest::scratch("gpu-test-profiles");
  int i = 0;
  for (const auto& [name, yaml] : gpu_test_profiles(dir)) {
    INFO(name << ":\n" << yaml);
    const fs::path file = dir / ("p" + std::to_string(i++) + ".yaml");
    tbtest::write_text(file, yaml);
    CHECK_NOTHROW(load_profile(file));
  }
  // The NCCL test's block after the tiny profile (which has a data block of its own).
  const fs::path tiny = tbtest::tiny_profile(dir, tbgpu::nccl_extra());
  CHECK_NOTHROW(load_profile(tiny));
}

