#pragma once
// A profile's YAML as the user wrote it: the file's text, parsed, with every key written once.
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <optional>
#include <string>

namespace trainbench {

// Parses a profile file. A path that is missing, not a regular file or cannot be read, and text
// that is not YAML or writes a key twice in one mapping, throw config_error (exit 2). `where` and
// `key` name what led here in the error (the command line, or the `extends:` that named the file).
YAML::Node parse_yaml_file(const std::filesystem::path& file, const std::string& where, const std::string& key);

// A key written twice in one mapping: yaml-cpp keeps both entries and a lookup finds the first,
// where PyYAML (the Python reference's reader) keeps the last, so the two would run different
// profiles. Refused, wherever it is.
struct duplicate_key {
  std::string path;  // dotted, from the text's top
  YAML::Mark first, second;
};
// The first duplicate in `node` at any depth; `prefix` is the dotted key of `node` ("" at a top).
std::optional<duplicate_key> find_duplicate_key(const YAML::Node& node, const std::string& prefix = "");
// "written twice in one mapping, on lines 3 and 5; ...": for a config_error naming the key.
std::string duplicate_message(const duplicate_key& d);

}  // namespace trainbench
