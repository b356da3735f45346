#include "trainbench/config/profile_diff.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <utility>

#include "trainbench/util/error.hpp"

namespace trainbench {
namespace {

using leaves = std::vector<std::pair<std::string, std::string>>;

// Lists are leaves: a changed normalize.mean is one change, written in flow style.
void flatten(const YAML::Node& node, const std::string& prefix, leaves& out) {
  if (node.IsMap()) {
    for (auto it = node.begin(); it != node.end(); ++it)
      flatten(it->second, prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar(), out);
    return;
  }
  if (node.IsScalar()) {
    out.emplace_back(prefix, node.Scalar());
    return;
  }
  if (node.IsNull()) {
    out.emplace_back(prefix, "null");
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out.emplace_back(prefix, e.c_str());
}

leaves leaves_of(const std::string& text) {
  leaves out;
  try {
    flatten(YAML::Load(text), "", out);
  } catch (const YAML::Exception& e) {
    throw input_error("a resolved profile that is not YAML: " + e.msg);
  }
  return out;
}

const std::string* find(const leaves& l, const std::string& key) {
  for (const auto& [k, v] : l)
    if (k == key) return &v;
  return nullptr;
}

}  // namespace

std::vector<key_change> profile_changes(const std::string& before_yaml, const std::string& after_yaml) {
  const leaves a = leaves_of(before_yaml), b = leaves_of(after_yaml);
  std::vector<key_change> out;
  for (const auto& [k, v] : a) {
    const std::string* other = find(b, k);
    if (!other || *other != v) out.push_back({k, v, other ? *other : ""});
  }
  for (const auto& [k, v] : b)
    if (!find(a, k)) out.push_back({k, "", v});
  return out;
}

std::vector<key_change> without_keys(std::vector<key_change> changes, const std::vector<std::string>& prefixes) {
  auto dropped = [&](const key_change& c) {
    return std::any_of(prefixes.begin(), prefixes.end(),
                       [&](const std::string& p) { return c.key == p || c.key.rfind(p + ".", 0) == 0; });
  };
  changes.erase(std::remove_if(changes.begin(), changes.end(), dropped), changes.end());
  return changes;
}

std::string describe_changes(const std::vector<key_change>& changes) {
  std::string out;
  for (const auto& c : changes) {
    if (!out.empty()) out += ", ";
    out += c.key + " " + (c.before.empty() ? "(unset)" : c.before) + " -> " + (c.after.empty() ? "(unset)" : c.after);
  }
  return out;
}

}  // namespace trainbench
