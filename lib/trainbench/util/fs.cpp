#include "trainbench/util/fs.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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

void check_writable_folder(const std::filesystem::path& folder, const std::string& what) {
  namespace fs = std::filesystem;
  const fs::path target = folder.empty() ? fs::path(".") : folder;
  fs::path existing = target;
  std::error_code ec;
  while (!fs::exists(existing, ec) && existing.has_parent_path() && existing != existing.parent_path())
    existing = existing.parent_path();
  if (!fs::exists(existing, ec)) existing = ".";
  const std::string where = what + " '" + target.string() + "': ";
  if (!fs::is_directory(existing, ec))
    throw input_error(where + "cannot create a folder there: '" + existing.string() + "' is a file");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    throw input_error(where + "folder '" + existing.string() + "' is not writable (" + std::strerror(errno) + ")");
}

}  // namespace trainbench
