// The workload identity compare, plan and history share (report/identity.hpp): what is left out
// (names, descriptions, report paths, the measurement plan) and what tells workloads apart.
#include <catch2/catch.hpp>

#include "trainbench/config/profile.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/report/identity.hpp"

using namespace trainbench;
using nlohmann::json;

namespace {

json report_of(const profile& p, const std::string& measurement = "run", int world = 0) {
  json results = {{"repeats", json::array()}};
  if (world > 0) results["distributed"] = {{"world_size", world}, {"ranks_in_results", world}};
  return {{"schema_version", 1},
          {"measurement", measurement},
          {"profile",
           {{"name", p.name},
            {"hash", profile_hash(p)},
            {"workload_hash", workload_hash(p)},
            {"resolved", to_yaml(p)}}},
          {"results", results}};
}

profile base_profile() {
  profile p;
  p.name = "cpu-01-batch-32";
  p.description = "the first rung";
  p.device = "cpu";
  p.train.batch_size = 64;
  return p;
}

}  // namespace

TEST_CASE("identity: a rename, a description, a report path and the measurement plan keep the workload") {
  const profile p = base_profile();
  const std::string key = identity_of(report_of(p)).key();
  const auto keys = identity_of(report_of(p)).keys;
  CHECK(keys == std::vector<std::string>{"device: cpu", "train.batch_size: 64"});
  profile q = p;
  q.name = "renamed";
  q.description = "edited in a pull request";
  q.report.path = "elsewhere/{name}.json";
  q.measure.processes = 5;
  q.measure.repeats = 9;
  q.measure.warmup_batches = 2;
  q.dist.timeout_s = 60;
  REQUIRE(profile_hash(q) != profile_hash(p));
  CHECK(identity_of(report_of(q)).key() == key);
}

TEST_CASE("identity: a workload key, the kind of measurement and the world size tell workloads apart") {
  const profile p = base_profile();
  const std::string key = identity_of(report_of(p)).key();
  profile q = p;
  q.train.batch_size = 32;  // back to the default: the key drops out of the identity, and it differs
  CHECK(identity_of(report_of(q)).key() != key);
  CHECK(identity_of(report_of(p, "bench-data")).key() != key);
  CHECK(identity_of(report_of(p, "run", 2)).key() != identity_of(report_of(p, "run", 1)).key());
  CHECK(identity_of(report_of(p, "run", 1)).key() == key);  // one rank is a one-process run
  json one_rank = report_of(p, "run", 2);  // a two-rank job whose ranks could not be gathered
  one_rank["results"]["distributed"]["ranks_in_results"] = 1;
  CHECK(identity_of(one_rank).key() == identity_of(report_of(p, "run", 2)).key());
}

TEST_CASE("identity: a key a later release adds with its default changes nothing, one this release lacks counts") {
  const profile p = base_profile();
  json r = report_of(p);
  const std::string key = identity_of(r).key();
  // An older report: a key of today missing from its resolved profile is the default.
  std::string resolved = r["profile"]["resolved"];
  const auto at = resolved.find("  zero_init_residual: false\n");
  REQUIRE(at != std::string::npos);
  json older = r;
  older["profile"]["resolved"] = resolved.erase(at, std::string("  zero_init_residual: false\n").size());
  CHECK(identity_of(older).key() == key);
  // A newer report: a key this trainbench does not know is part of the workload.
  json newer = r;
  newer["profile"]["resolved"] = r["profile"]["resolved"].get<std::string>() + "future:\n  knob: 3\n";
  CHECK(identity_of(newer).key() != key);
  // Without a resolved profile: the report's workload_hash.
  json bare = r;
  bare["profile"].erase("resolved");
  CHECK_FALSE(identity_of(bare).from_resolved);
  CHECK(identity_of(bare).workload == "hash:" + workload_hash(p));
}
