#include "trainbench/util/fs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

// A file system that is full (or a quota, or a size limit, or a failing disk) is the run's
// failure, exit 1; a path that cannot be written (permissions, a missing folder) is bad input,
// exit 2, and is normally found before anything runs (check_writable_file).
[[noreturn]] void write_failed(const std::string& what, int error) {
  const std::string message = what + ": " + std::strerror(error);
  if (error == ENOSPC || error == EDQUOT || error == EFBIG || error == EIO) throw run_error("io", message);
  throw input_error(message);
}

bool write_all(int fd, const std::string& content) {
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

void write_file_atomic(const std::filesystem::path& path, const std::string& content) {
  namespace fs = std::filesystem;
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) write_failed("cannot write '" + tmp.string() + "'", errno);
  const bool written = write_all(fd, content);
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;  // NFS reports a full disk here
  const int close_errno = errno;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    write_failed("failed writing '" + tmp.string() + "'", !written ? write_errno : close_errno);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    write_failed("cannot rename '" + tmp.string() + "' to '" + path.string() + "'", ec.value());
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw input_error("cannot read '" + path.string() + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

void remove_made(const std::vector<std::filesystem::path>& made) {
  std::error_code ec;
  for (auto it = made.rbegin(); it != made.rend(); ++it) std::filesystem::remove(*it, ec);  // only if empty
}

// Writes and removes a file in `folder`: only doing it shows that it works (a read-only mount, a
// folder of /proc, a full disk, permissions that root ignores in access() but not in mkdir).
std::string write_test(const std::filesystem::path& folder) {
  const std::filesystem::path probe = folder / (".trainbench-write-test." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  const bool written = ::write(fd, "x", 1) == 1;
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  const int close_errno = errno;
  ::unlink(probe.c_str());
  if (!written) return std::strerror(write_errno);
  if (!closed) return std::strerror(close_errno);
  return "";
}

void check_folder(const std::filesystem::path& folder, const std::string& where) {
  namespace fs = std::filesystem;
  const fs::path target = folder.empty() ? fs::path(".") : folder;
  std::vector<fs::path> missing;  // innermost first
  fs::path existing = target;
  std::error_code ec;
  while (!fs::exists(existing, ec) && existing.has_parent_path() && existing != existing.parent_path()) {
    missing.push_back(existing);
    existing = existing.parent_path();
  }
  if (!fs::exists(existing, ec))
    missing.push_back(existing);  // a relative path's first part: made in the working directory
  else if (!fs::is_directory(existing, ec))
    throw input_error(where + "cannot create a folder there: '" + existing.string() + "' is a file");
  std::vector<fs::path> made;
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (fs::create_directory(*it, ec)) {
      made.push_back(*it);
    } else if (ec) {
      remove_made(made);
      throw input_error(where + "cannot create folder '" + it->string() + "': " + ec.message());
    }  // else another process made it meanwhile (ranks, ladder rungs): theirs, not ours to remove
  }
  const std::string failed = write_test(target);
  if (!failed.empty()) {
    remove_made(made);
    throw input_error(where + "cannot write into folder '" + target.string() + "': " + failed);
  }
}

}  // namespace

void check_writable_folder(const std::filesystem::path& folder, const std::string& what) {
  check_folder(folder, what + " '" + (folder.empty() ? std::string(".") : folder.string()) + "': ");
}

void check_writable_file(const std::filesystem::path& file, const std::string& what) {
  const std::string where = what + " '" + file.string() + "': ";
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw input_error(where + "is a folder; expected a file name");
  check_folder(file.parent_path(), where);
}

}  // namespace trainbench
