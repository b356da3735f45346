// Real reports validate against schemas/report.schema.json (a small validator for the keywords it uses).
#include <catch2/catch.hpp>

#include "helpers.hpp"
#include "trainbench/report/compare.hpp"

using nlohmann::json;

namespace {

bool has_type(const json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

void validate(const json& v, const json& schema, const std::string& path, std::vector<std::string>& errors) {
  if (schema.contains("type")) {
    const json& t = schema["type"];
    bool ok = false;
    if (t.is_string())
      ok = has_type(v, t);
    else
      for (const auto& one : t) ok = ok || has_type(v, one);
    if (!ok) {
      errors.push_back(path + ": expected type " + t.dump() + ", got " + v.dump().substr(0, 60));
      return;
    }
  }
  if (schema.contains("enum") && std::find(schema["enum"].begin(), schema["enum"].end(), v) == schema["enum"].end())
    errors.push_back(path + ": " + v.dump() + " not in " + schema["enum"].dump());
  if (schema.contains("minimum") && v.is_number() && v.get<double>() < schema["minimum"].get<double>())
    errors.push_back(path + ": below minimum");
  if (schema.contains("exclusiveMinimum") && v.is_number() &&
      v.get<double>() <= schema["exclusiveMinimum"].get<double>())
    errors.push_back(path + ": not above exclusiveMinimum");
  if (v.is_object()) {
    if (schema.contains("required"))
      for (const auto& k : schema["required"])
        if (!v.contains(k.get<std::string>())) errors.push_back(path + ": missing required key " + k.dump());
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (schema.contains("properties") && schema["properties"].contains(it.key()))
        validate(it.value(), schema["properties"][it.key()], path + "." + it.key(), errors);
      else if (schema.contains("additionalProperties") && schema["additionalProperties"].is_object())
        validate(it.value(), schema["additionalProperties"], path + "." + it.key(), errors);
      else if (schema.contains("additionalProperties") && schema["additionalProperties"] == false)
        errors.push_back(path + ": key " + it.key() + " is not in the schema");
    }
  }
  if (v.is_array() && schema.contains("items"))
    for (std::size_t i = 0; i < v.size(); ++i)
      validate(v[i], schema["items"], path + "[" + std::to_string(i) + "]", errors);
}

std::vector<std::string> check(const json& report) { return tbtest::schema_errors(report); }

}  // namespace

std::vector<std::string> tbtest::schema_errors(const json& report) {
  const json schema = tbtest::read_json(tbtest::source_dir() / "schemas/report.schema.json");
  std::vector<std::string> errors;
  validate(report, schema, "$", errors);
  return errors;
}

TEST_CASE("the validator itself rejects what it should") {
  json bad = {{"schema_version", 2}};
  CHECK(check(bad).size() > 3);
}

TEST_CASE("reports from real CPU runs validate against the schema") {
  const auto dir = tbtest::scratch("schema");
  const auto profile = tbtest::tiny_profile(dir);
  REQUIRE(tbtest::run_cli("run --config '" + profile + "' --set train.amp=bf16 --set model.channels_last=true").code ==
          0);
  auto errors = check(tbtest::read_json(dir / "tiny.json"));
  INFO(errors.size() << " errors, first: " << (errors.empty() ? "" : errors.front()));
  CHECK(errors.empty());
  // An error report has the same shape.
  REQUIRE(tbtest::run_cli_memory_limited("run --config '" + profile + "'" + tbtest::too_big_for_this_machine).code ==
          1);
  errors = check(tbtest::read_json(dir / "tiny.json"));
  INFO(errors.size() << " errors, first: " << (errors.empty() ? "" : errors.front()));
  CHECK(errors.empty());
}

TEST_CASE("compare --format json validates against schemas/compare.schema.json, which names every field") {
  const json schema = tbtest::read_json(tbtest::source_dir() / "schemas/compare.schema.json");
  const auto report = [](const std::string& name, const std::string& hash, const std::vector<double>& rates) {
    json reps = json::array();
    for (double r : rates) reps.push_back({{"samples", 100}, {"elapsed_s", 100.0 / r}, {"samples_per_s", r}});
    return json{{"schema_version", 1},
                {"status", "ok"},
                {"profile",
                 {{"name", name}, {"hash", hash}, {"workload_hash", "w-" + hash}, {"resolved", "a: 1\nb: " + name + "\n"}}},
                {"context", {{"gpu", nullptr}, {"libtorch", "2.11.0"}, {"build_type", "Release"}}},
                {"results", {{"repeats", reps}}}};
  };
  const std::vector<double> r{100, 101, 99, 100.5, 99.5};
  json moved = report("moved", "h4", r);
  moved["profile"]["resolved"] = "a: 2\nb: moved\n";
  const auto c = trainbench::compare_reports(
      {report("same", "h1", r), report("slow", "h2", r), report("empty", "h3", {}), report("moved", "h5", r)},
      {report("same", "h1", r), report("slow", "h2", {80, 81, 79, 80.5, 79.5}), report("empty", "h3", r), moved},
      trainbench::compare_options{});
  REQUIRE(c.unmatched.size() == 1);
  const json out = json::parse(trainbench::format_comparison(c, "json"));
  std::vector<std::string> errors;
  validate(out, schema, "$", errors);
  INFO(errors.size() << " errors, first: " << (errors.empty() ? "" : errors.front()));
  CHECK(errors.empty());
  CHECK(out["rows"].size() == 3);
}
