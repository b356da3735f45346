// A profile as a file: a path that is not a file it can read is the user's to fix (exit 2, naming
// the file), wherever it occurs.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "helpers.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/util/error.hpp"

using namespace trainbench;
namespace fs = std::filesystem;

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
