#pragma once
#include <filesystem>
#include <string>

namespace trainbench {

// Write through a temporary file in the same folder and rename it into place, so a reader
// (or a crash) never sees half a file. Creates missing parent folders.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);
std::string read_text_file(const std::filesystem::path& path);

}  // namespace trainbench
