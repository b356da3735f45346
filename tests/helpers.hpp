#pragma once
// Shared by the tests: run the real executable, make scratch folders, read reports.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <cstdint>
#include <vector>

namespace tbtest {

struct cli_result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs the trainbench executable with these arguments (shell words) from the source tree.
cli_result run_cli(const std::string& args);
// The same under an address-space limit of 16 GiB, so that a valid profile whose buffers need
// more fails to allocate (exit 1, a report) as on a machine that small, whatever this one has.
// Sanitizer builds reserve terabytes of address space for shadow memory and cannot run under a
// limit; there the allocation's size (hundreds of GiB, past any overcommit heuristic) must fail.
cli_result run_cli_memory_limited(const std::string& args);
// Batch buffers of 300 GiB: within the profile bounds, beyond the limit above.
constexpr const char* too_big_for_this_machine =
    " --set data.image_size=8192 --set train.batch_size=400 --set data.samples=400";
// Runs a shell script from the source tree; $TB is the executable under test.
cli_result run_shell(const std::string& script);
// The same where file permissions hold: as root, in a child without CAP_DAC_OVERRIDE and
// CAP_DAC_READ_SEARCH (with them root reads a file of mode 000). code is -1 where this process
// cannot give them up (root without CAP_SETPCAP).
cli_result run_shell_with_permissions(const std::string& script);
// A fresh, empty folder under the build tree for one test.
std::filesystem::path scratch(const std::string& name);
std::filesystem::path source_dir();
std::string exe();  // the trainbench executable under test
void write_text(const std::filesystem::path& file, const std::string& text);
nlohmann::json read_json(const std::filesystem::path& file);
// What in a report does not match schemas/report.schema.json (empty: it validates).
std::vector<std::string> schema_errors(const nlohmann::json& report);
// A small, fast CPU profile (synthetic data, tiny images) that tests adjust with --set.
// An RGB JPEG written with arithmetic coding (libjpeg-turbo's arith_code), which nvJPEG cannot
// decode; trainbench's own encoder writes Huffman-coded files only.
std::vector<std::uint8_t> encode_arithmetic_jpeg(const std::uint8_t* rgb, int width, int height);
// An RGB JPEG coded as R, G, B (no colour transform: an Adobe segment with transform 0), as some
// tools write them; Huffman-coded, baseline.
std::vector<std::uint8_t> encode_rgb_coded_jpeg(const std::uint8_t* rgb, int width, int height);
// Both of the above: libjpeg-turbo's encoder at quality 90, arithmetic or Huffman, YCbCr or RGB.
std::vector<std::uint8_t> encode_libjpeg(const std::uint8_t* rgb, int width, int height, bool arithmetic,
                                         bool rgb_coded);
std::string tiny_profile(const std::filesystem::path& dir, const std::string& extra = "");

}  // namespace tbtest
