// Real reports validate against schemas/report.schema.json (a small validator for the keywords it uses).
#include <catch2/catch.hpp>

#include "helpers.hpp"

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
