// The GPU kit's tests phase (scripts/gpu-tests.sh) on stand-ins for [gpu] cases (fixtures/
// gpu_cases): what it does with a pass, a failure, a failure that only comes beside other cases, a
// hang and a signal can only be seen on a GPU host otherwise, where device time is scarce.
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "helpers.hpp"

namespace fs = std::filesystem;

namespace {

// gpu-tests.tsv: status by case name.
std::map<std::string, std::string> statuses(const fs::path& out) {
  std::ifstream in(out / "gpu-tests.tsv");
  std::map<std::string, std::string> by_name;
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string status, seconds, cap, name;
    std::getline(row, status, '\t');
    std::getline(row, seconds, '\t');
    std::getline(row, cap, '\t');
    std::getline(row, name);
    by_name[name] = status;
  }
  return by_name;
}

std::string read_all(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The kit's command for these cases, on a copy of the stand-ins named for this test (its
// processes are told apart from another test's by that name): the two long ones are listed in a
// budget file.
std::string kit(const fs::path& dir, const std::string& name) {
  tbtest::write_text(dir / "budget.txt", "# test\n2\thangs\n5\ttakes a second\n");
  fs::create_directories(dir / "out");
  fs::copy_file(TRAINBENCH_FAKE_GPU_CASES, dir / name, fs::copy_options::overwrite_existing);
  return "bash scripts/gpu-tests.sh --tests '" + (dir / name).string() + "' --out '" + (dir / "out").string() +
         "' --seconds 120 --budget-file '" + (dir / "budget.txt").string() + "' --python '" TRAINBENCH_TEST_PYTHON "'";
}

// Whether a process of this test's stand-ins is still running, by its name (a command line would
// also match the shell that runs the kit with that path).
std::string orphans(const std::string& name) {
  return "pgrep -x '" + name + "' > /dev/null && echo ORPHAN || echo none left";
}

}  // namespace

TEST_CASE("GPU kit tests phase: a hang costs its cap, a failure beside others reruns alone, hidden cases stay out") {
  const auto dir = tbtest::scratch("gpu-kit-tests");
  const auto r = tbtest::run_shell(kit(dir, "cases-hang") + "; echo \"kit exit $?\"; " + orphans("cases-hang"));
  INFO(r.output);
  CHECK(r.output.find("kit exit 1\n") != std::string::npos);
  CHECK(r.output.find("none left") != std::string::npos);
  const auto s = statuses(dir / "out");
  CHECK(s.size() == 6);  // the hidden benchmark is not among them
  CHECK(s.at("passes") == "pass");
  CHECK(s.at("a case, with a comma, passes") == "pass");
  CHECK(s.at("fails wherever it runs") == "fail");
  CHECK(s.at("fails only after another case in its process") == "pass");  // alone, after failing in the group
  CHECK(s.at("hangs") == "timeout");
  CHECK(s.at("takes a second") == "pass");  // after the hang was stopped in its group, alone
  CHECK(read_all(dir / "out/gpu-tests-left.txt") == "hangs\n");
  CHECK(r.output.find("'hangs' ran past its cap of 2 s: stopped") != std::string::npos);
}

TEST_CASE("GPU kit tests phase: SIGTERM stops the group's process, and what it was running counts as not run") {
  const auto dir = tbtest::scratch("gpu-kit-tests-signal");
  // SIGTERM once the second group (the hang, then the second-long case) has started. (A job a
  // script starts in the background ignores SIGINT, and so cannot trap it: the kit's SIGINT comes
  // from a terminal or a timeout, its SIGTERM from anywhere.)
  const std::string group2 = (dir / "out/gpu-tests-group-2.xml").string();
  const auto r = tbtest::run_shell(kit(dir, "cases-term") + " & p=$!; for i in $(seq 600); do [ -e '" + group2 +
                                   "' ] && break; sleep 0.1; done; sleep 2; kill -TERM $p; wait $p; echo \"kit exit $?\"; " +
                                   orphans("cases-term"));
  INFO(r.output);
  CHECK(r.output.find("kit exit 1\n") != std::string::npos);
  CHECK(r.output.find("none left") != std::string::npos);
  const auto s = statuses(dir / "out");
  CHECK(s.at("passes") == "pass");
  CHECK(s.at("fails wherever it runs") == "fail");  // from the group: no case starts after the signal
  CHECK(s.at("hangs") == "not-run");
  CHECK(s.at("takes a second") == "not-run");
  const std::string left = read_all(dir / "out/gpu-tests-left.txt");
  CHECK(left.find("hangs\n") != std::string::npos);
  CHECK(left.find("takes a second\n") != std::string::npos);
}
