#pragma once
// Which keys differ between two resolved profiles, as to_yaml writes them (no torch here): for
// messages that say why two runs are not the same, and for what a ladder rung really ran.
#include <string>
#include <vector>

namespace trainbench {

struct key_change {
  std::string key;            // dotted path, e.g. train.batch_size
  std::string before, after;  // the values as YAML text; "" where the key is absent
};

// Every leaf key whose value differs, in the order of `before` (then keys only in `after`).
// Throws input_error when a text is not YAML.
std::vector<key_change> profile_changes(const std::string& before_yaml, const std::string& after_yaml);

// Drops the changes under these keys or key prefixes ("measure" drops measure.*).
std::vector<key_change> without_keys(std::vector<key_change> changes, const std::vector<std::string>& prefixes);

// "train.batch_size 512 -> 8, data.image_size 224 -> 32"
std::string describe_changes(const std::vector<key_change>& changes);

}  // namespace trainbench
