#pragma once
// Loading profiles (extends chains, --set overrides, validation) and writing them back.
#include <filesystem>
#include <string>
#include <vector>

#include "trainbench/config/profile.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

struct loaded_profile {
  profile value;
  std::filesystem::path path;      // the file the user named
  std::vector<std::string> chain;  // files read, child first
  std::vector<std::string> sets;   // the --set assignments applied, in order
};

// Where a key's value came from, for an error found after loading (the device, a batch size
// only a GPU can search): "--set key=value" when the last --set naming the key or a block
// above it gave it, else the profile file.
std::string origin_of(const loaded_profile& lp, const std::string& key);
// The profile file, with the --set assignments when there are any: for an error that names no key.
std::string profile_and_sets(const loaded_profile& lp);

// Throws config_error naming file, line, column and key for anything wrong. An input path
// (data.path, model.weights) written in a file is relative to that file; given with --set, to
// the working directory. The result holds it relative to the working directory.
loaded_profile load_profile(const std::filesystem::path& file, const std::vector<std::string>& sets = {});
// Every error of a profile file, not only the first (empty when it loads): `validate`.
std::vector<config_error> profile_errors(const std::filesystem::path& file);

// The fully resolved profile as YAML that load_profile accepts unchanged.
std::string to_yaml(const profile& p);

// Every key of the schema, in the order of the one list (visit()), with what it takes: tests
// and docs walk this, so a new key is covered without editing them.
enum class key_kind {
  string,
  nullable_string,
  boolean,
  integer,
  unsigned_integer,
  number,
  choice,
  numbers,
  batch_size
};
struct profile_key {
  std::string path;  // e.g. "data.image_size"
  key_kind kind;
  std::vector<std::string> allowed;  // choice: the names it accepts
};
std::vector<profile_key> profile_keys();

// Identity of the resolved profile: compare matches results on it.
std::string profile_hash(const profile& p);
// The same, ignoring what does not change the work (name, description, report, measure counts).
std::string workload_hash(const profile& p);
// The workload one rank runs: workload_hash without the dist block (the baseline of scaling efficiency).
std::string per_rank_workload_hash(const profile& p);

}  // namespace trainbench
