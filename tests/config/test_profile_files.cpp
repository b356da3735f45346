// A profile as a file: a key written twice, and a path that is not a file it can read, are the
// user's to fix (exit 2, naming the file), wherever they occur.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "helpers.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

namespace {

struct duplicate_case {
  const char* yaml;
  const char* key;
  int line;          // of the second occurrence, where the error points
  const char* both;  // the two places, as the message gives them
};

const duplicate_case duplicates[] = {
    {"name: a\ntrain: {batch_size: 8}\nname: b\n", "name", 3, "lines 1 and 3"},
    {"name: a\ntrain:\n  batch_size: 8\n  batch_size: 64\n", "train.batch_size", 4, "lines 3 and 4"},
    {"name: a\ntrain: {batch_size: 8, batch_size: 64}\n", "train.batch_size", 2, "line 2, columns 9 and 24"},
    {"name: a\ntrain:\n  optimizer:\n    lr: 0.1\n    momentum: 0.9\n    lr: 0.2\n", "train.optimizer.lr", 6,
     "lines 4 and 6"},
    {"name: a\ntrain: {batch_size: 8}\ndata: {workers: 0}\ntrain: {amp: bf16}\n", "train", 4, "lines 2 and 4"},
    {"name: a\n'name': b\n", "name", 2, "lines 1 and 2"},
    {"name: a\ndata: {normalize: {mean: [0.5, 0.5, 0.5], mean: [0.1, 0.1, 0.1]}}\n", "data.normalize.mean", 2,
     "line 2, columns 20 and 43"},
};

void check_duplicate(const fs::path& file, const std::vector<std::string>& sets, const std::string& key,
                     const std::string& where, const std::string& both) {
  try {
    load_profile(file, sets);
    FAIL("no error");
  } catch (const config_error& e) {
    INFO(e.what());
    CHECK(e.key() == key);
    CHECK(e.where() == where);
    CHECK_THAT(e.message(), Catch::Contains("written twice") && Catch::Contains(both));
  }
}

}  // namespace

TEST_CASE("a key written twice is an error naming the key, the file and both lines, at every level") {
  const auto dir = tbtest::scratch("duplicate-keys");
  int i = 0;
  for (const auto& c : duplicates) {
    INFO(c.yaml);
    const fs::path file = dir / ("dup" + std::to_string(i++) + ".yaml");
    tbtest::write_text(file, c.yaml);
    const std::string where = file.string() + ":" + std::to_string(c.line) + ":";
    try {
      load_profile(file);
      FAIL("no error");
    } catch (const config_error& e) {
      INFO(e.what());
      CHECK(e.key() == c.key);
      CHECK(e.where().rfind(where, 0) == 0);
      CHECK_THAT(e.message(), Catch::Contains("written twice") && Catch::Contains(c.both));
    }
  }

  SECTION("in a file reached through extends, and in a --set value") {
    tbtest::write_text(dir / "base.yaml", "name: base\nmeasure:\n  repeats: 3\n  warmup_batches: 1\n  repeats: 5\n");
    tbtest::write_text(dir / "child.yaml", "extends: base.yaml\ntrain: {batch_size: 8}\n");
    check_duplicate(dir / "child.yaml", {}, "measure.repeats", (dir / "base.yaml").string() + ":5:3", "lines 3 and 5");
    tbtest::write_text(dir / "ok.yaml", "name: ok\n");
    const std::string set = "train={batch_size: 8, batch_size: 64}";
    check_duplicate(dir / "ok.yaml", {set}, "train.batch_size", "--set " + set, "line 1, columns 2 and 17");
    // Two --set of one key are an order, not a duplicate: the last wins.
    CHECK(load_profile(dir / "ok.yaml", {"train.batch_size=4", "train.batch_size=2"}).value.train.batch_size == 2);
  }

  SECTION("on the command line: exit 2, nothing run, and validate says the same") {
    const fs::path file = dir / "cli.yaml";
    tbtest::write_text(file, "name: cli\ndevice: cpu\ntrain:\n  batch_size: 8\n  batch_size: 64\n");
    for (const std::string& args : {"run -c '" + file.string() + "' --out '" + (dir / "r.json").string() + "'",
                                    "validate '" + file.string() + "'"}) {
      const auto r = tbtest::run_cli(args);
      INFO(args << "\n" << r.output);
      CHECK(r.code == 2);
      CHECK_THAT(r.output,
                 Catch::Contains(file.string() + ":5:3: key 'train.batch_size'") && Catch::Contains("lines 4 and 5"));
    }
    CHECK_FALSE(fs::exists(dir / "r.json"));
  }
}

TEST_CASE("a profile path that is a folder or a pipe is refused, naming it, without blocking") {
  const auto dir = tbtest::scratch("profile-not-a-file");
  fs::create_directories(dir / "folder.yaml");
  REQUIRE(::mkfifo((dir / "pipe.yaml").c_str(), 0644) == 0);
  for (const char* name : {"folder.yaml", "pipe.yaml"}) {
    INFO(name);
    try {
      load_profile(dir / name);
      FAIL("no error");
    } catch (const config_error& e) {
      CHECK(e.where() == (dir / name).string());
      CHECK_THAT(e.message(), Catch::Contains((dir / name).string()) && !Catch::Contains("does not exist"));
    }
  }
  tbtest::write_text(dir / "child.yaml", "name: c\nextends: folder.yaml\n");
  try {
    load_profile(dir / "child.yaml");
    FAIL("no error");
  } catch (const config_error& e) {
    CHECK(e.key() == "extends");
    CHECK(e.where() == (dir / "child.yaml").string() + ":2:10");
  }
}

// Mode 000 as the user meets it: a file that is there, that this process may not open.
TEST_CASE("a profile that cannot be read exits 2 naming it, and a ladder lists it with the other refusals") {
  const auto dir = tbtest::scratch("profile-unreadable");
  tbtest::tiny_profile(dir);
  fs::create_directories(dir / "rungs");
  fs::copy_file(dir / "tiny.yaml", dir / "rungs/01-locked.yaml");
  tbtest::write_text(dir / "rungs/02-misspelt.yaml", "name: misspelt\ntrain: {batch_sise: 8}\n");
  const fs::path locked = dir / "rungs/01-locked.yaml";
  fs::permissions(locked, fs::perms::none);
  const auto probe = tbtest::run_shell_with_permissions("cat '" + locked.string() + "' > /dev/null");
  if (probe.code <= 0) {
    WARN("this process cannot make a file unreadable to its children (root without CAP_SETPCAP): not checked");
    return;
  }

  auto r = tbtest::run_shell_with_permissions("\"$TB\" run -c '" + locked.string() + "' --out '" +
                                              (dir / "r.json").string() + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("cannot read profile file '" + locked.string() + "'"));
  CHECK_FALSE(fs::exists(dir / "r.json"));

  // Through extends: the error points at the extends line.
  tbtest::write_text(dir / "child.yaml", "extends: rungs/01-locked.yaml\n");
  r = tbtest::run_shell_with_permissions("\"$TB\" validate '" + (dir / "child.yaml").string() + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains((dir / "child.yaml").string() + ":1:10: key 'extends'") &&
                           Catch::Contains(locked.string()));

  r = tbtest::run_shell_with_permissions("\"$TB\" ladder '" + (dir / "rungs").string() + "' --out '" +
                                         (dir / "ladder").string() + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("2 of 2 profiles cannot run") && Catch::Contains(locked.string()) &&
                           Catch::Contains("batch_sise"));
}
