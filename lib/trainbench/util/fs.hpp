#pragma once
#include <filesystem>
#include <string>

namespace trainbench {

// Write through a temporary file in the same folder and rename it into place, so a reader
// (or a crash) never sees half a file. Creates missing parent folders.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);
std::string read_text_file(const std::filesystem::path& path);
// Before anything runs: throws input_error (exit 2) when files could not be written into this
// folder later (a part of the path is a file, or the nearest existing folder is not writable).
// Creates nothing. `what` names the setting in the message, e.g. "--out".
void check_writable_folder(const std::filesystem::path& folder, const std::string& what);

}  // namespace trainbench
