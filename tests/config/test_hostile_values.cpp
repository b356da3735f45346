// Hostile values over the whole schema: every key (as the schema code lists it, so a new key is
// covered without editing this file) gets what a new user might type by mistake. Every case must
// end with exit 0 or 2, never 1, a crash or a hang; exit 2 names the key and writes no report.
//
// Cost: about 50 keys x 13 values. Loading a profile takes microseconds, a process start of the
// LibTorch-linked executable most of a second, so each case is first loaded in this process:
//  - rejected at load (config_error): the error must name the key. `run` loads the profile before
//    it builds or writes anything, and prints that same error, so such a case exits 2 with no
//    report; the first rejected case of each kind of key (integer, string, choice, ...) still goes
//    through the real executable to hold that.
//  - accepted at load: the real executable runs it to the end (tiny settings: one measured batch
//    of two 32 x 32 images), since a value that passes validation can still fail where memory is
//    allocated, threads start or the loop runs; that is what these cases are here to find.
// The cases are split over four test cases so that `ctest -j 2` spreads them over both cores.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/util/error.hpp"

namespace fs = std::filesystem;
using namespace trainbench;

namespace {

constexpr int parts = 4;

// A wrong type (list, map, null), a negative, zero, huge values (int, beyond 64 bits, beyond any
// double's use, infinities, NaN, a 4096-character string), an empty string, an unknown name.
std::vector<std::string> hostile_values() {
  return {"[1, 2]",
          "{a: 1}",
          "~",
          "-1",
          "0",
          "2147483647",
          "99999999999999999999",
          "1e300",
          ".inf",
          ".nan",
          "''",
          "no_such_value",
          std::string(4096, 'x')};
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shown(const std::string& value) { return value.size() > 40 ? value.substr(0, 12) + "..." : value; }

// Tiny and fast: image_size 32 leaves batch norm two values per channel after the last stage.
fs::path write_base(const fs::path& dir) {
  const fs::path file = dir / "base.yaml";
  tbtest::write_text(file, R"(name: hostile
device: cpu
threads: 1
data: {source: synthetic, samples: 8, source_size: 8, image_size: 32, workers: 0}
train: {batch_size: 2}
measure: {warmup_batches: 0, measured_batches: 1, repeats: 1, nvtx: off}
report: {path: report.json}
)");
  return file;
}

bool empty_folder(const fs::path& dir) { return fs::is_empty(dir); }

// The real executable in a fresh folder (relative report paths land there), bounded in time.
void run_case(const fs::path& base, const fs::path& dir, const std::string& key, const std::string& value,
              bool rejected_at_load) {
  fs::create_directories(dir);
  const auto r = tbtest::run_shell("cd '" + dir.string() + "' && timeout 300 \"$TB\" run --quiet --config '" +
                                   base.string() + "' --set " + shell_quoted(key + "=" + value));
  INFO(key << " = " << shown(value) << " (exit " << r.code << ")\n" << r.output.substr(0, 2000));
  CHECK((r.code == 0 || r.code == 2));
  if (rejected_at_load) CHECK(r.code == 2);
  if (r.code == 2) {
    CHECK(r.output.find(key) != std::string::npos);
    CHECK(empty_folder(dir));
  }
}

void run_part(int part) {
  const auto dir = tbtest::scratch("hostile-" + std::to_string(part));
  const fs::path base = write_base(dir / "profile");
  const auto keys = profile_keys();
  REQUIRE(keys.size() >= 40);
  int ran = 0, rejected = 0;
  std::set<key_kind> kinds_checked;
  for (std::size_t k = part; k < keys.size(); k += parts) {
    const std::string& key = keys[k].path;
    int n = 0;
    for (const auto& value : hostile_values()) {
      const fs::path case_dir = dir / (std::to_string(k) + "-" + std::to_string(n++));
      bool accepted = true;
      try {
        load_profile(base, {key + "=" + value});
      } catch (const config_error& e) {
        accepted = false;
        ++rejected;
        INFO(key << " = " << shown(value) << ": " << e.what());
        CHECK(std::string(e.what()).find(key) != std::string::npos);
      }
      if (accepted || !kinds_checked.count(keys[k].kind)) {
        run_case(base, case_dir, key, value, !accepted);
        ++ran;
        if (!accepted) kinds_checked.insert(keys[k].kind);
      }
    }
  }
  INFO(ran << " cases run by the executable, " << rejected << " rejected at load");
  CHECK(rejected > 0);
}

}  // namespace

TEST_CASE("hostile values over the schema end in exit 0 or 2, part 1 of 4") { run_part(0); }
TEST_CASE("hostile values over the schema end in exit 0 or 2, part 2 of 4") { run_part(1); }
TEST_CASE("hostile values over the schema end in exit 0 or 2, part 3 of 4") { run_part(2); }
TEST_CASE("hostile values over the schema end in exit 0 or 2, part 4 of 4") { run_part(3); }

TEST_CASE("the key list is the schema's: every key that --set takes, and only those") {
  const auto dir = tbtest::scratch("hostile-keys");
  const fs::path base = write_base(dir);
  const auto keys = profile_keys();
  for (const auto& k : keys) {
    INFO(k.path);
    CHECK(k.path.find('.') != 0);
    if (k.kind == key_kind::choice) {
      REQUIRE_FALSE(k.allowed.empty());
      // Some values need another key too (data.decode: device needs an image folder), so
      // --set must take at least one of them on the base profile.
      int loaded = 0;
      for (const auto& v : k.allowed) {
        try {
          load_profile(base, {k.path + "=" + v});
          ++loaded;
        } catch (const config_error&) {
        }
      }
      CHECK(loaded > 0);
    }
  }
  CHECK_THROWS_AS(load_profile(base, {"data.no_such_key=1"}), config_error);
  const auto has = [&](const std::string& path) {
    for (const auto& k : keys)
      if (k.path == path) return true;
    return false;
  };
  CHECK(has("data.image_size"));
  CHECK(has("measure.measured_batches"));
  CHECK(has("dist.timeout_s"));
}
