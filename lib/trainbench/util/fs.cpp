#include "trainbench/util/fs.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "trainbench/util/error.hpp"

namespace trainbench {

void write_file_atomic(const std::filesystem::path& path, const std::string& content) {
  namespace fs = std::filesystem;
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw input_error("cannot write '" + tmp.string() + "'");
    out << content;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw input_error("failed writing '" + tmp.string() + "'");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw input_error("cannot rename '" + tmp.string() + "' to '" + path.string() + "': " + ec.message());
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error("cannot read '" + path.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace trainbench
