// NVTX ranges as Nsight Systems receives them, without a GPU and without nsys: the real
// executable runs on the CPU with an injection library (nvtx/nvtx_recorder.cpp) that writes every
// domain, push and pop to a file; the tests read it back and compare it with the report.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "helpers.hpp"

namespace fs = std::filesystem;

#ifdef TRAINBENCH_NVTX_RECORDER

namespace {

struct range {
  std::string text;
  long tid = 0;
  unsigned long domain = 0;
  long long begin_ns = 0, end_ns = -1;  // CLOCK_MONOTONIC, the clock of std::chrono::steady_clock
  int parent = -1;
  std::vector<int> children;
};

struct nvtx_log {
  std::vector<std::string> errors;  // pops without a push, pushes never popped
  std::map<unsigned long, std::string> domains;
  std::vector<range> ranges;  // every domain's, in push order
  std::vector<int> roots;     // trainbench's outermost ranges, in order
  std::set<long> threads;     // that pushed a trainbench range
};

nvtx_log read_nvtx(const fs::path& file) {
  nvtx_log log;
  std::ifstream in(file);
  std::map<std::pair<long, unsigned long>, std::vector<int>> open;  // per thread and domain
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind;
    long tid = 0;
    long long ns = 0;
    unsigned long domain = 0;
    words >> kind >> tid >> ns >> domain;
    std::string text;
    std::getline(words >> std::ws, text);
    auto& stack = open[{tid, domain}];
    if (kind == "domain") {
      log.domains[domain] = text;
    } else if (kind == "push") {
      range r;
      r.text = text;
      r.tid = tid;
      r.domain = domain;
      r.begin_ns = ns;
      r.parent = stack.empty() ? -1 : stack.back();
      const int index = static_cast<int>(log.ranges.size());
      if (r.parent >= 0) log.ranges[static_cast<std::size_t>(r.parent)].children.push_back(index);
      log.ranges.push_back(r);
      stack.push_back(index);
    } else if (kind == "pop") {
      if (stack.empty()) {
        log.errors.push_back("a pop without a push on thread " + std::to_string(tid));
        continue;
      }
      log.ranges[static_cast<std::size_t>(stack.back())].end_ns = ns;
      stack.pop_back();
    }
  }
  for (const auto& [where, stack] : open)
    for (int i : stack) log.errors.push_back("never popped: '" + log.ranges[static_cast<std::size_t>(i)].text + "'");
  for (std::size_t i = 0; i < log.ranges.size(); ++i) {
    const range& r = log.ranges[i];
    if (log.domains[r.domain] != "trainbench") continue;
    log.threads.insert(r.tid);
    if (r.parent < 0) log.roots.push_back(static_cast<int>(i));
  }
  return log;
}

// The injection library: where the build put it, or where TRAINBENCH_NVTX_RECORDER says (a test
// binary carried to another host, as scripts/gpu-check.sh --prebuilt does). NVTX ignores an
// injection path it cannot load, so a missing library would look like a run without ranges.
std::string recorder_path() {
  const char* env = std::getenv("TRAINBENCH_NVTX_RECORDER");
  return env && *env ? env : TRAINBENCH_NVTX_RECORDER;
}

std::string nvtx_env(const fs::path& log) {
  const std::string lib = recorder_path();
  if (!fs::is_regular_file(lib))
    FAIL("the NVTX injection library is not at " << lib
                                                 << ": no range can be recorded. Build the target "
                                                    "trainbench_nvtx_recorder, or set TRAINBENCH_NVTX_RECORDER to "
                                                    "its path (scripts/gpu-check.sh does for --prebuilt)");
  return "NVTX_INJECTION64_PATH='" + lib + "' TRAINBENCH_NVTX_LOG='" + log.string() + "' ";
}

// For runs that must push ranges: the recorder opens its log at the first NVTX call it gets, so
// no log at all means it never ran (not loaded, or NVTX compiled out of this trainbench), which
// is a different failure from ranges that are missing or misplaced.
nvtx_log read_recorded(const fs::path& file) {
  if (!fs::exists(file))
    FAIL("the NVTX injection library (" << recorder_path() << ") recorded nothing, not even a domain: it was not "
                                        << "loaded, or this trainbench has NVTX compiled out (trainbench --version)");
  return read_nvtx(file);
}

std::string errors_of(const nvtx_log& log) {
  std::string out;
  for (const auto& e : log.errors) out += e + "\n";
  return out;
}

// "batch 12" -> 12; -1 when the text is not `name` and a number.
long long number_of(const std::string& text, const std::string& name) {
  if (text.rfind(name + " ", 0) != 0) return -1;
  try {
    std::size_t used = 0;
    const long long n = std::stoll(text.substr(name.size() + 1), &used);
    return used == text.size() - name.size() - 1 ? n : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

std::string numbered(const std::string& name, long long i) { return name + " " + std::to_string(i); }

// What docs/profiling.md promises for `batch` and `stage`, checked against the report: the
// outermost ranges in the runner's order, every batch of warmup, calibration and each window
// under its range, one __next__, copy data, forward and backward per batch, the stage ranges at
// `stage` (and only there), and nothing inside a window but the batches the report counts.
void check_ranges(const nvtx_log& log, const nlohmann::json& report, bool stages) {
  INFO(errors_of(log));
  CHECK(log.errors.empty());
  CHECK(log.threads.size() == 1);  // the training thread; the loader's workers push nothing
  const auto& results = report.at("results");
  const std::size_t windows = results.at("repeats").size();
  const long long per_window = results.at("window_batches").get<long long>();
  const long long warmup = results.at("warmup_batches_done").get<long long>();
  REQUIRE(windows > 0);
  auto at = [&](int i) -> const range& { return log.ranges[static_cast<std::size_t>(i)]; };

  std::vector<std::string> top;
  for (int i : log.roots) top.push_back(at(i).text);
  std::vector<std::string> expected;
  if (!top.empty() && top.front() == "prepare") expected.push_back("prepare");
  expected.push_back("warmup");
  if (report.at("measure").at("min_window_s").get<double>() > 0) expected.push_back("calibration");
  for (std::size_t w = 0; w < windows; ++w) expected.push_back(numbered("measured window", static_cast<long long>(w)));
  CHECK(top == expected);

  long long next = 0, in_windows = 0;
  for (int root : log.roots) {
    const range& parent = at(root);
    if (parent.text == "prepare") continue;
    const bool window = number_of(parent.text, "measured window") >= 0;
    if (parent.text == "warmup") CHECK(static_cast<long long>(parent.children.size()) == warmup);
    if (window) {
      CHECK(static_cast<long long>(parent.children.size()) == per_window);
      in_windows += static_cast<long long>(parent.children.size());
    }
    for (int b : parent.children) {
      const range& batch = at(b);
      INFO(parent.text << " > " << batch.text);
      REQUIRE(batch.text == numbered("batch", next));  // batches only, numbered on from the last
      std::vector<std::string> names;
      for (int c : batch.children) names.push_back(at(c).text);
      const std::vector<std::string> want = {numbered("__next__", next), numbered("copy data", next),
                                             numbered("forward", next), numbered("backward", next)};
      CHECK(names == want);  // the CPU copies no batch ahead: batch i fetches batch i
      for (int c : batch.children) {
        const range& r = at(c);
        std::vector<std::string> inner;
        for (int k : r.children) inner.push_back(at(k).text);
        std::vector<std::string> stage_ranges;
        if (r.text == want[0]) stage_ranges = {numbered("data_wait", next)};
        if (r.text == want[1]) stage_ranges = {numbered("h2d", next)};
        if (r.text == want[2]) stage_ranges = {numbered("forward", next)};
        if (r.text == want[3]) stage_ranges = {numbered("backward", next), numbered("optimizer", next)};
        INFO(r.text);
        CHECK(inner == (stages ? stage_ranges : std::vector<std::string>{}));
        for (int k : r.children) CHECK(at(k).children.empty());
      }
      ++next;
    }
  }
  CHECK(in_windows == per_window * static_cast<long long>(windows));
  // Every batch fetched and copied once, wherever in the log.
  std::map<long long, int> fetched, copied;
  for (const range& r : log.ranges) {
    if (number_of(r.text, "__next__") >= 0) ++fetched[number_of(r.text, "__next__")];
    if (number_of(r.text, "copy data") >= 0) ++copied[number_of(r.text, "copy data")];
  }
  CHECK(static_cast<long long>(fetched.size()) == next);
  for (const auto& [j, n] : fetched) CHECK(n == 1);
  CHECK(copied == fetched);
  // The stages the report measured are the stage ranges (and `batch`, the batch range itself).
  if (stages) {
    std::set<std::string> names = {"batch"};
    for (const range& r : log.ranges)
      for (const char* s : {"data_wait", "h2d", "preprocess", "forward", "backward", "allreduce", "optimizer"})
        if (number_of(r.text, s) >= 0 && r.parent >= 0 && at(r.parent).text.rfind("batch ", 0) != 0) names.insert(s);
    std::set<std::string> measured;
    for (const auto& [name, summary] : results.at("stages_s").items()) measured.insert(name);
    CHECK(names == measured);
  }
}

// The trace's `measured window` spans bracket what the report times (taken after the loader's
// rings are read, and right after the window's closing synchronisation), on the same clock: a
// window's NVTX range must lie within its span, so nothing before or after the measured time
// (waiting for other ranks, writing the trace, reading the loss) shows as inside the window.
void check_windows_against_trace(const nvtx_log& log, const nlohmann::json& trace) {
  const auto origin = trace.at("otherData").at("steady_clock_origin_ns").get<long long>();
  std::vector<std::pair<long long, long long>> spans;  // ns, from the file's microseconds (exact to 1 ns)
  for (const auto& e : trace.at("traceEvents"))
    if (e.value("cat", "") == "window")
      spans.emplace_back(origin + std::llround(e.at("ts").get<double>() * 1000),
                         origin + std::llround((e.at("ts").get<double>() + e.at("dur").get<double>()) * 1000));
  std::vector<const range*> windows;
  for (int i : log.roots)
    if (number_of(log.ranges[static_cast<std::size_t>(i)].text, "measured window") >= 0)
      windows.push_back(&log.ranges[static_cast<std::size_t>(i)]);
  REQUIRE(windows.size() == spans.size());
  for (std::size_t w = 0; w < spans.size(); ++w) {
    INFO("window " << w);
    CHECK(windows[w]->begin_ns >= spans[w].first);
    CHECK(windows[w]->end_ns <= spans[w].second);
  }
}

const std::string tiny_counts = " --set data.workers=1 --set measure.warmup_batches=2 --set measure.measured_batches=3";

}  // namespace

TEST_CASE("NVTX at batch and stage: the documented ranges, nested, one per batch, matching the report") {
  const auto dir = tbtest::scratch("e2e-nvtx");
  const auto profile = tbtest::tiny_profile(dir);
  // min_window_s: calibration windows run batches the report does not count; they must sit under
  // `calibration`, never under a `measured window`.
  for (const std::string level : {"batch", "stage"}) {
    INFO(level);
    const fs::path log = dir / ("nvtx-" + level + ".log");
    const std::string calibrate = level == "batch" ? " --set measure.min_window_s=0.02" : "";
    const fs::path trace = dir / ("trace-" + level + ".json");
    const auto r = tbtest::run_shell(nvtx_env(log) + "\"$TB\" run -q -c '" + profile + "'" + tiny_counts + calibrate +
                                     " --set measure.nvtx=" + level + " --trace '" + trace.string() + "'");
    INFO(r.output);
    REQUIRE(r.code == 0);
    const nvtx_log l = read_recorded(log);
    check_ranges(l, tbtest::read_json(dir / "tiny.json"), level == "stage");
    check_windows_against_trace(l, tbtest::read_json(trace));
  }
}

// bottleneck runs the loop and its ceiling in one process, in turns, each turn a run() of its
// own runner: the turns say whose they are, and the windows are numbered as each side's report.
TEST_CASE("NVTX in bottleneck: a range per turn named after its side, windows numbered as its report") {
  const auto dir = tbtest::scratch("e2e-nvtx-bottleneck");
  const fs::path log = dir / "nvtx.log";
  const auto r = tbtest::run_shell(nvtx_env(log) + "\"$TB\" bottleneck -q -c '" + tbtest::tiny_profile(dir) +
                                   "' --rounds 2 --out '" + (dir / "b").string() + "' --set measure.nvtx=batch" +
                                   " --set measure.warmup_batches=1 --set measure.measured_batches=2");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const nvtx_log l = read_recorded(log);
  INFO(errors_of(l));
  CHECK(l.errors.empty());
  std::vector<std::string> turns;
  for (int i : l.roots) turns.push_back(l.ranges[static_cast<std::size_t>(i)].text);
  CHECK(turns == std::vector<std::string>{"tiny", "tiny-ceiling", "tiny-ceiling", "tiny"});  // ABBA
  for (const std::string side : {"tiny", "tiny-ceiling"}) {
    INFO(side);
    const auto report = tbtest::read_json(dir / "b" / (side == "tiny" ? "loop.json" : "ceiling.json"));
    std::vector<std::string> windows, expected;
    for (int i : l.roots) {
      const range& turn = l.ranges[static_cast<std::size_t>(i)];
      if (turn.text != side) continue;
      for (int c : turn.children)
        if (number_of(l.ranges[static_cast<std::size_t>(c)].text, "measured window") >= 0)
          windows.push_back(l.ranges[static_cast<std::size_t>(c)].text);
    }
    for (std::size_t w = 0; w < report.at("results").at("repeats").size(); ++w)
      expected.push_back(numbered("measured window", static_cast<long long>(w)));
    CHECK(windows == expected);
  }
}

TEST_CASE("NVTX off: no range, not even the domain") {
  const auto dir = tbtest::scratch("e2e-nvtx-off");
  const fs::path log = dir / "nvtx.log";
  const auto r = tbtest::run_shell(nvtx_env(log) + "\"$TB\" run -q -c '" + tbtest::tiny_profile(dir) + "'" +
                                   tiny_counts + " --set measure.nvtx=off");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const nvtx_log l = read_nvtx(log);
  for (const auto& [id, name] : l.domains) CHECK(name != "trainbench");
  CHECK(l.roots.empty());
  // The library was loaded all the same: at `stage` the same command records ranges.
  const auto on = tbtest::run_shell(nvtx_env(dir / "on.log") + "\"$TB\" run -q -c '" + tbtest::tiny_profile(dir) + "'" +
                                    tiny_counts + " --set measure.nvtx=stage");
  REQUIRE(on.code == 0);
  CHECK_FALSE(read_recorded(dir / "on.log").roots.empty());
}

TEST_CASE("NVTX: every push is popped when the run fails inside a window") {
  const auto dir = tbtest::scratch("e2e-nvtx-failed");
  const auto made = tbtest::run_cli("make-dataset imagefolder --out '" + (dir / "ds").string() +
                                    "' --classes 2 --per-class 6 --seed 3");
  REQUIRE(made.code == 0);
  // Unshuffled, the files come in name order, 4 to a batch: the tenth, cut short, is in batch 2.
  const fs::path bad = dir / "ds/train/class_0001/class_0001_000003.JPEG";
  REQUIRE(fs::exists(bad));
  fs::resize_file(bad, fs::file_size(bad) / 3);
  const fs::path log = dir / "nvtx.log";
  const auto r = tbtest::run_shell(
      nvtx_env(log) + "\"$TB\" run -q -c '" + tbtest::tiny_profile(dir) + "' --set data.source=imagefolder" +
      " --set data.path='" + (dir / "ds").string() + "' --set data.image_size=32 --set model.num_classes=2" +
      " --set data.shuffle=false --set measure.warmup_batches=0 --set measure.measured_batches=3" +
      " --set measure.nvtx=stage");
  INFO(r.output);
  REQUIRE(r.code == 2);  // bad input found mid-run
  REQUIRE(r.output.find(bad.string()) != std::string::npos);
  const nvtx_log l = read_recorded(log);
  INFO(errors_of(l));
  CHECK(l.errors.empty());
  // The failure came inside the window, in batch 2's wait for its data.
  REQUIRE(!l.roots.empty());
  const range& window = l.ranges[static_cast<std::size_t>(l.roots.back())];
  CHECK(window.text == "measured window 0");
  REQUIRE(window.children.size() == 3);
  CHECK(l.ranges[static_cast<std::size_t>(window.children.back())].text == "batch 2");
}

TEST_CASE("NVTX: every push is popped when Ctrl-C stops the run inside a window") {
  const auto dir = tbtest::scratch("e2e-nvtx-sigint");
  const auto profile = tbtest::tiny_profile(dir);
  const fs::path log = dir / "nvtx.log", err = dir / "stderr.txt";
  const std::string exe = tbtest::exe(), log_env = log.string();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    (void)!freopen(err.c_str(), "w", stderr);
    (void)!freopen("/dev/null", "w", stdout);
    setenv("NVTX_INJECTION64_PATH", TRAINBENCH_NVTX_RECORDER, 1);
    setenv("TRAINBENCH_NVTX_LOG", log_env.c_str(), 1);
    execl(exe.c_str(), exe.c_str(), "run", "--config", profile.c_str(), "--set", "measure.measured_batches=100000",
          "--set", "measure.nvtx=stage", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until warmup is over, i.e. the run is inside its first measured window.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool measuring = false;
  while (!measuring && std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(err);
    std::stringstream ss;
    ss << in.rdbuf();
    measuring = ss.str().find("warmup: 1 batches done") != std::string::npos;
    if (!measuring) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  REQUIRE(measuring);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  const nvtx_log l = read_recorded(log);
  INFO(errors_of(l));
  CHECK(l.errors.empty());
  REQUIRE(l.roots.size() >= 2);
  CHECK(l.ranges[static_cast<std::size_t>(l.roots.back())].text == "measured window 0");
}

// A copy stream copies the next batch while the current one trains: inside `batch i` the ranges
// that fetch and copy carry the number of the batch they fetch, each batch fetched once.
TEST_CASE("NVTX on CUDA with a copy stream: every batch fetched and copied once, under its own number", "[gpu]") {
  const auto dir = tbtest::scratch("gpu-nvtx-copy-stream");
  const fs::path log = dir / "nvtx.log";
  const auto r = tbtest::run_shell(nvtx_env(log) + "\"$TB\" run -q -c '" + tbtest::tiny_profile(dir) + "'" +
                                   tiny_counts + " --set device=cuda --set data.pin_memory=true" +
                                   " --set transfer.copy_stream=true --set measure.nvtx=stage");
  INFO(r.output);
  // This file stays free of LibTorch, so the run itself says whether there is a GPU.
  if (r.code == 2)
    FAIL("exit 2, refused before it ran: no CUDA device (run [gpu] tests on a GPU host), or a setting --strict or "
         "the device refused: the output above says which");
  REQUIRE(r.code == 0);
  const nvtx_log l = read_recorded(log);
  INFO(errors_of(l));
  CHECK(l.errors.empty());
  std::map<std::string, std::map<long long, int>> seen;  // name -> number -> count
  for (const range& g : l.ranges) {
    for (const char* outer : {"__next__", "copy data"}) {
      const long long j = number_of(g.text, outer);
      if (j < 0) continue;
      ++seen[outer][j];
      REQUIRE(g.children.size() == 1);
      CHECK(l.ranges[static_cast<std::size_t>(g.children.front())].text ==
            numbered(std::string(outer) == "__next__" ? "data_wait" : "h2d", j));
    }
    const long long i = number_of(g.text, "batch");
    if (i >= 0) ++seen["batch"][i];
  }
  for (const auto& [name, counts] : seen)
    for (const auto& [j, n] : counts) {
      INFO(name << " " << j);
      CHECK(n == 1);
    }
  // One batch ahead: every trained batch was fetched, and one more.
  CHECK(seen["__next__"].size() == seen["batch"].size() + 1);
  CHECK(seen["copy data"].size() == seen["__next__"].size());
}

#endif  // TRAINBENCH_NVTX_RECORDER
