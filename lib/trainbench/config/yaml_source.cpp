#include "trainbench/config/yaml_source.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <system_error>

#include "trainbench/util/error.hpp"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

std::string place(const std::string& source, const YAML::Mark& m) {
  return source + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// Whatever keeps the file from being read (a missing folder, no permission, a folder or a pipe
// in its place) is the user's to fix: config_error, never a library's exception (exit 1).
std::string read_text(const fs::path& file, const std::string& where, const std::string& key) {
  const std::string name = "profile file '" + file.string() + "'";
  std::error_code ec;
  const fs::file_status st = fs::status(file, ec);
  if (st.type() == fs::file_type::not_found) throw config_error(where, key, name + " does not exist");
  if (ec) throw config_error(where, key, "cannot read " + name + ": " + ec.message());
  if (fs::is_directory(st)) throw config_error(where, key, name + " is a folder; expected a YAML file");
  // A pipe or a device could block or never end: only regular files are profiles.
  if (!fs::is_regular_file(st)) throw config_error(where, key, name + " is not a regular file");
  std::FILE* f = std::fopen(file.c_str(), "rb");
  if (!f) throw config_error(where, key, "cannot read " + name + ": " + std::strerror(errno));
  std::string text;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const int read_errno = std::ferror(f) ? errno : 0;
  std::fclose(f);
  if (read_errno) throw config_error(where, key, "cannot read " + name + ": " + std::strerror(read_errno));
  return text;
}

}  // namespace

std::optional<duplicate_key> find_duplicate_key(const YAML::Node& node, const std::string& prefix) {
  if (node.IsSequence()) {
    std::size_t i = 0;
    for (const auto& item : node)
      if (auto d = find_duplicate_key(item, prefix + "[" + std::to_string(i++) + "]")) return d;
    return std::nullopt;
  }
  if (!node.IsMap()) return std::nullopt;
  std::map<std::string, YAML::Mark> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (it->first.IsScalar()) {
      const auto [first, fresh] = seen.emplace(key, it->first.Mark());
      if (!fresh) return duplicate_key{path, first->second, it->first.Mark()};
    }
    if (auto d = find_duplicate_key(it->second, path)) return d;
  }
  return std::nullopt;
}

std::string duplicate_message(const duplicate_key& d) {
  const std::string where =
      d.first.line != d.second.line
          ? "lines " + std::to_string(d.first.line + 1) + " and " + std::to_string(d.second.line + 1)
          : "line " + std::to_string(d.first.line + 1) + ", columns " + std::to_string(d.first.column + 1) + " and " +
                std::to_string(d.second.column + 1);
  return "written twice in one mapping, on " + where + "; YAML readers disagree on which one counts: keep one";
}

YAML::Node parse_yaml_file(const fs::path& file, const std::string& where, const std::string& key) {
  const std::string text = read_text(file, where, key);
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw config_error(place(file.string(), e.mark), "", "invalid YAML: " + e.msg);
  }
  if (auto d = find_duplicate_key(node))
    throw config_error(place(file.string(), d->second), d->path, duplicate_message(*d));
  return node;
}

}  // namespace trainbench
