#pragma once
// A profile's YAML as the user wrote it: the file's text, parsed.
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <string>

namespace trainbench {

// Parses a profile file. A path that is missing, not a regular file or cannot be read, and text
// that is not YAML, throw config_error (exit 2). `where` and `key` name what led here in the error
// (the command line, or the `extends:` that named the file).
YAML::Node parse_yaml_file(const std::filesystem::path& file, const std::string& where, const std::string& key);

}  // namespace trainbench
