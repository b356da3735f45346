#pragma once
#include <filesystem>
#include <string>

namespace trainbench {

// Write through a temporary file in the same folder and rename it into place, so a reader
// (or a crash) never sees half a file. Creates missing parent folders. A full file system (or
// quota, size limit, I/O error) throws run_error (exit 1); any other failure input_error.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);
std::string read_text_file(const std::filesystem::path& path);
// Before anything runs: throws input_error (exit 2) when files could not be written into this
// folder later. Makes the missing folders and writes and removes a file in it, since only that
// shows it works (root passes access() on /proc; a read-only mount; a full disk). What it made
// stays when the check passes (the run writes there) and is removed when it fails. `what` names
// the setting in the message, e.g. "--out".
void check_writable_folder(const std::filesystem::path& folder, const std::string& what);
// The same for a file's folder, naming the file; a folder in the file's place is refused too.
void check_writable_file(const std::filesystem::path& file, const std::string& what);

}  // namespace trainbench
