#include "trainbench/report/identity.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "trainbench/config/profile_diff.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/sha256.hpp"

namespace trainbench {
using nlohmann::json;

const std::vector<std::string>& non_workload_keys() {
  static const std::vector<std::string> keys{"name",    "description",   "report",
                                             "measure", "dist.timeout_s", "dist.heartbeat_timeout_s"};
  return keys;
}

std::string workload_identity::key() const {
  return sha256_hex(measurement + "\n" + std::to_string(world_size) + "\n" + workload).substr(0, 16);
}

std::string measurement_of(const json& report) {
  if (report.contains("measurement") && report["measurement"].is_string())
    return report["measurement"].get<std::string>();
  // Reports from before the field: bench-data's had no model.
  const json& model = report.value("model", json::object());
  return model.is_object() && model.value("parameters", 1) == 0 ? "bench-data" : "run";
}

int world_size_of(const json& report) {
  if (!report.contains("results") || !report["results"].is_object()) return 1;
  const json& d = report["results"].value("distributed", json(nullptr));
  if (!d.is_object()) return 1;
  // The job's size, not how many ranks' windows were gathered: a run whose ranks could not be
  // gathered stays in its job's series, where history and compare say why it is not judged.
  return d.value("world_size", 1);
}

workload_identity identity_of(const json& report) {
  workload_identity id;
  id.measurement = measurement_of(report);
  id.world_size = world_size_of(report);
  const json profile = report.value("profile", json::object());
  const std::string resolved =
      profile.contains("resolved") && profile["resolved"].is_string() ? profile["resolved"].get<std::string>() : "";
  if (!resolved.empty()) {
    // Reports of one profile share their resolved text: each text is read once (a folder of
    // reports, compare's pooling, history's migration).
    static std::mutex mutex;
    static std::map<std::string, std::pair<std::vector<std::string>, std::string>> seen;
    {
      const std::lock_guard<std::mutex> lock(mutex);
      if (const auto it = seen.find(resolved); it != seen.end()) {
        id.keys = it->second.first;
        id.workload = it->second.second;
        return id;
      }
    }
    static const std::string defaults = to_yaml(trainbench::profile{});
    try {
      for (const auto& c : without_keys(profile_changes(defaults, resolved), non_workload_keys()))
        if (!c.after.empty()) id.keys.push_back(c.key + ": " + c.after);  // absent: the default, as released later
      std::sort(id.keys.begin(), id.keys.end());
      std::string text;
      for (const auto& k : id.keys) text += k + "\n";
      id.workload = sha256_hex(text).substr(0, 16);
      const std::lock_guard<std::mutex> lock(mutex);
      if (seen.size() >= 1000) seen.clear();  // bounded
      seen.emplace(resolved, std::make_pair(id.keys, id.workload));
      return id;
    } catch (const input_error&) {
      id.keys.clear();  // not YAML: the report's own hashes below
    }
  }
  id.from_resolved = false;
  const std::string hash = profile.contains("workload_hash") && profile["workload_hash"].is_string()
                               ? profile["workload_hash"].get<std::string>()
                               : profile.value("hash", std::string());
  id.workload = "hash:" + hash;
  return id;
}

}  // namespace trainbench
