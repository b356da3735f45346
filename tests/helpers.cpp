#include "helpers.hpp"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
// After <cstdio>: jpeglib.h uses FILE and size_t without declaring them.
#include <jpeglib.h>

namespace tbtest {
namespace fs = std::filesystem;

// Compiled-in defaults, overridable so a test binary built elsewhere runs against this checkout
// (scripts/gpu-check.sh --prebuilt).
fs::path source_dir() {
  const char* env = std::getenv("TRAINBENCH_SOURCE_DIR");
  return env ? env : TRAINBENCH_SOURCE_DIR;
}

std::string exe() {
  const char* env = std::getenv("TRAINBENCH_EXE");
  return env ? env : TRAINBENCH_EXE;
}

cli_result run_cli(const std::string& args) { return run_shell("\"$TB\" " + args); }

cli_result run_cli_memory_limited(const std::string& args) {
  const bool sanitized = std::getenv("ASAN_OPTIONS") || std::getenv("TSAN_OPTIONS");
  return run_shell(std::string(sanitized ? "" : "ulimit -v 16777216 && ") + "\"$TB\" " + args);
}

namespace {

std::string shell_command(const std::string& script) {
  return "cd '" + source_dir().string() + "' && TB='" + exe() + "' && (" + script + ") 2>&1";
}

// In a forked child, before exec (system calls only). Dropped from the bounding and inheritable
// sets too, or root's exec would hand them back.
bool drop_read_override() {
  if (::geteuid() != 0) return true;
  for (int cap : {CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH})
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return false;
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  const unsigned keep = ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));  // both below 32
  data[0].effective &= keep;
  data[0].permitted &= keep;
  data[0].inheritable &= keep;
  return ::syscall(SYS_capset, &header, data) == 0;
}

constexpr int cannot_drop = 125;

}  // namespace

cli_result run_shell_with_permissions(const std::string& script) {
  const std::string cmd = shell_command(script);
  cli_result r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  const pid_t pid = ::fork();
  if (pid < 0) return r;
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    if (!drop_read_override()) ::_exit(cannot_drop);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  std::array<char, 4096> buf;
  ssize_t n;
  while ((n = ::read(fds[0], buf.data(), buf.size())) > 0) r.output.append(buf.data(), static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (r.code == cannot_drop && r.output.empty()) r.code = -1;
  return r;
}

cli_result run_shell(const std::string& script) {
  const std::string cmd = shell_command(script);
  cli_result r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("trainbench-tests-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_text(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

std::string tiny_profile(const fs::path& dir, const std::string& extra) {
  const fs::path file = dir / "tiny.yaml";
  write_text(file, R"(name: tiny
device: cpu
seed: 1
threads: 1
model: {arch: resnet18, num_classes: 10}
data: {source: synthetic, samples: 64, source_size: 8, image_size: 16, workers: 0}
train: {batch_size: 4, optimizer: {lr: 0.01, momentum: 0.9}}
measure: {warmup_batches: 1, measured_batches: 2, repeats: 2, nvtx: off}
report: {path: ")" + (dir / "tiny.json").string() +
                       "\"}\n" + extra);
  return file.string();
}

std::vector<std::uint8_t> encode_arithmetic_jpeg(const std::uint8_t* rgb, int width, int height) {
  return encode_libjpeg(rgb, width, height, true, false);
}

std::vector<std::uint8_t> encode_rgb_coded_jpeg(const std::uint8_t* rgb, int width, int height) {
  return encode_libjpeg(rgb, width, height, false, true);
}

std::vector<std::uint8_t> encode_libjpeg(const std::uint8_t* rgb, int width, int height, bool arithmetic,
                                         bool rgb_coded) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &out, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  cinfo.arith_code = arithmetic ? TRUE : FALSE;
  // RGB coded: libjpeg writes an Adobe segment with transform 0 and no JFIF segment.
  if (rgb_coded) jpeg_set_colorspace(&cinfo, JCS_RGB);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(rgb + static_cast<std::size_t>(cinfo.next_scanline) * width * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<std::uint8_t> bytes(out, out + size);
  jpeg_destroy_compress(&cinfo);
  std::free(out);
  return bytes;
}

}  // namespace tbtest
