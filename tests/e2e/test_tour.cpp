// What a new user trips over on the tour: quiet output, unwritable folders, misspelt commands,
// several mistakes in one file, relative paths, CPU-only pitfalls, and what a report claims.
#include <algorithm>
#include <cctype>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "helpers.hpp"

namespace fs = std::filesystem;

TEST_CASE("quiet (-q) means warnings and the report path, before or after the command") {
  const auto dir = tbtest::scratch("tour-quiet");
  const auto file = tbtest::tiny_profile(dir);
  for (const std::string& args : {"-q run -c '" + file + "'", "run -q -c '" + file + "'"}) {
    const auto r = tbtest::run_cli(args);
    INFO(args << "\n" << r.output);
    REQUIRE(r.code == 0);
    CHECK(r.output.find("report written to " + (dir / "tiny.json").string()) != std::string::npos);
    CHECK(r.output.find("samples/s    median") == std::string::npos);  // no summary (a noise warning may say samples/s)
    CHECK(r.output.find("intra-op threads") == std::string::npos);     // no info lines
  }
}

TEST_CASE("an --out that cannot be written is refused before anything runs") {
  const auto dir = tbtest::scratch("tour-unwritable");
  const auto file = tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "a-file", "not a folder\n");
  const auto r = tbtest::run_cli("run -c '" + file + "' --out '" + (dir / "a-file/sub/r.json").string() + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("--out") != std::string::npos);
  CHECK(r.output.find("a-file' is a file") != std::string::npos);
  CHECK(r.output.find("warmup") == std::string::npos);  // nothing ran
  const auto ladder = tbtest::run_cli("ladder '" + file + "' --out '" + (dir / "a-file/l").string() + "'");
  CHECK(ladder.code == 2);
  const auto neck = tbtest::run_cli("bottleneck -c '" + file + "' --out '" + (dir / "a-file/b").string() + "'");
  CHECK(neck.code == 2);
}

// /proc lets root past access() and every permission, yet nothing can be made in it: only
// making the folder and writing a file there shows that the run could not write its output.
TEST_CASE("every output path is made and test-written before anything runs, and a refusal names it and leaves nothing") {
  const auto dir = tbtest::scratch("tour-outputs");
  const std::string p = "'" + tbtest::tiny_profile(dir) + "'";
  const std::string beside = " --out '" + (dir / "b").string() + "'";
  const std::pair<std::string, std::string> cases[] = {
      {"run -c " + p + " --out /proc/nope/r.json", "--out '/proc/nope/r.json'"},
      {"run -c " + p + " --set report.path=/proc/nope/r.json", "report.path '/proc/nope/r.json'"},
      {"run -c " + p + " --out '/proc/nope/r-{rank}.json'", "--out '/proc/nope/r-0.json'"},
      {"run -c " + p + " --trace /proc/nope/t.json", "--trace '/proc/nope/t.json'"},
      {"run -c " + p + " --set measure.trace=/proc/self/t.json", "measure.trace '/proc/self/t.json'"},
      {"run -c " + p + " --save-weights /proc/nope/w.pt", "--save-weights '/proc/nope/w.pt'"},
      {"bench-data -c " + p + " --out /proc/nope/r.json", "--out '/proc/nope/r.json'"},
      {"bottleneck -c " + p + " --out /proc/nope", "--out '/proc/nope'"},
      {"bottleneck -c " + p + beside + " --trace /proc/nope/t.json", "--trace '/proc/nope/t.json'"},
      {"ladder " + p + " --out /proc/nope", "--out '/proc/nope'"},
  };
  for (const auto& [args, named] : cases) {
    const auto r = tbtest::run_cli(args);
    INFO(args << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(named) != std::string::npos);
    CHECK(r.output.find("warmup") == std::string::npos);  // nothing ran
  }
  CHECK_FALSE(fs::exists(dir / "tiny.json"));
  // The folders made for the check go again when a deeper part cannot be made.
  const fs::path deep = dir / "new" / "deeper" / std::string(300, 'x') / "r.json";
  const auto r = tbtest::run_cli("run -c " + p + " --out '" + deep.string() + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("--out '" + deep.string() + "'") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "new"));
}

TEST_CASE("a misspelt command gets a suggestion, and bench-data refuses options it would ignore") {
  auto r = tbtest::run_cli("rn -c configs/quickstart.yaml");
  CHECK(r.code == 2);
  CHECK(r.output.find("unknown command 'rn'; did you mean 'run'?") != std::string::npos);
  r = tbtest::run_cli("ladderr configs/cpu");
  CHECK(r.code == 2);
  CHECK(r.output.find("did you mean 'ladder'?") != std::string::npos);
  const auto dir = tbtest::scratch("tour-bench-data-options");
  const auto file = tbtest::tiny_profile(dir);
  for (const char* option : {" --save-weights w.pt", " --baseline b.json"}) {
    r = tbtest::run_cli("bench-data -c '" + file + "'" + option);
    INFO(option << "\n" << r.output);
    CHECK(r.code == 2);
    CHECK_FALSE(fs::exists(dir / "tiny.json"));
  }
}

TEST_CASE("validate reports every error of a file, each with its place") {
  const auto dir = tbtest::scratch("tour-validate");
  tbtest::write_text(dir / "bad.yaml",
                     "name: bad\ntrain: {batch_sise: 8}\nmeasure: {repeats: 0}\ndata: {workers: -1}\n");
  const auto r = tbtest::run_cli("validate '" + (dir / "bad.yaml").string() + "' configs/quickstart.yaml");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("train.batch_sise': unknown key; did you mean 'batch_size'?") != std::string::npos);
  CHECK(r.output.find("measure.repeats': must be >= 1") != std::string::npos);
  CHECK(r.output.find("data.workers': must be >= 0") != std::string::npos);
  CHECK(r.output.find("bad.yaml:2:") != std::string::npos);  // file and line of the first
  CHECK(r.output.find("configs/quickstart.yaml: ok") != std::string::npos);
}

TEST_CASE("data.path in a file is relative to that file, with --set to the working directory") {
  const auto dir = tbtest::scratch("tour-data-path");
  tbtest::write_text(dir / "profiles/base.yaml", "name: p\ndata: {source: cifar10, path: ../data/cifar}\n");
  tbtest::write_text(dir / "profiles/more/child.yaml", "extends: ../base.yaml\nname: child\n");
  auto shown = [&](const std::string& args) {
    const auto r = tbtest::run_shell("cd '" + dir.string() + "' && \"$TB\" show " + args);
    INFO(r.output);
    REQUIRE(r.code == 0);
    const auto at = r.output.find("path: \"");
    return r.output.substr(at + 7, r.output.find('"', at + 7) - at - 7);
  };
  CHECK(shown("-c profiles/base.yaml") == "data/cifar");
  CHECK(shown("-c profiles/more/child.yaml") == "data/cifar");  // the file that sets it, not the child
  CHECK(shown("-c '" + (dir / "profiles/base.yaml").string() + "'") == (dir / "data/cifar").string());
  CHECK(shown("-c profiles/base.yaml --set data.path=elsewhere/cifar") == "elsewhere/cifar");
}

TEST_CASE("fp16 on a CPU says it is slow there, and skipped steps are a count with a console line") {
  const auto dir = tbtest::scratch("tour-fp16-cpu");
  const auto file = tbtest::tiny_profile(dir);
  const auto r = tbtest::run_cli("run -c '" + file + "' --set train.amp=fp16");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(tbtest::schema_errors(j).empty());
  CHECK(j["effective"]["notes"].dump().find("train.amp: fp16 on a CPU") != std::string::npos);
  const auto& skipped = j["results"]["amp"]["skipped_steps"];
  REQUIRE(skipped.is_number_integer());
  if (skipped.get<int>() > 0)
    CHECK(r.output.find("skipped " + std::to_string(skipped.get<int>())) != std::string::npos);
  // Why, cause by cause, adding up to the count; and how large the (normalised) input got.
  const auto& causes = j["results"]["amp"]["skipped_by_cause"];
  REQUIRE(causes.is_object());
  CHECK(causes["input"].get<int>() + causes["forward"].get<int>() + causes["backward"].get<int>() ==
        skipped.get<int>());
  CHECK(causes["input"] == 0);  // the synthetic images are finite
  CHECK(j["results"]["amp"]["input_abs_max"].get<double>() > 0.5);
  CHECK(j["results"]["amp"]["input_abs_max"].get<double>() < 3.0);
  // The console line gives the same split.
  if (skipped.get<int>() > 0) CHECK(r.output.find("skipped (input 0, forward ") != std::string::npos);
}

TEST_CASE("a report says null where nothing was measured, and how noisy its windows were") {
  const auto dir = tbtest::scratch("tour-report-nulls");
  const auto file = tbtest::tiny_profile(dir);
  REQUIRE(tbtest::run_cli("run -q -c '" + file + "'").code == 0);
  const auto j = tbtest::read_json(dir / "tiny.json");
  CHECK(j["results"]["amp"].is_null());        // no loss scaling
  CHECK(j["results"]["telemetry"].is_null());  // no NVML on a CPU run
  const double cv = j["results"]["samples_per_s"]["cv"];
  CHECK(j["results"]["noise"] == (cv <= 0.10 ? "ok" : cv <= 0.25 ? "noisy" : "very_noisy"));
  CHECK(tbtest::schema_errors(j).empty());
}

TEST_CASE("a refused baseline names the keys that differ") {
  const auto dir = tbtest::scratch("tour-baseline");
  const auto file = tbtest::tiny_profile(dir);
  REQUIRE(tbtest::run_cli("run -q -c '" + file + "' --out '" + (dir / "one.json").string() + "'").code == 0);
  const auto r = tbtest::run_cli("run -c '" + file + "' --set train.batch_size=8 --baseline '" +
                                 (dir / "one.json").string() + "'");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(r.output.find("train.batch_size 4 -> 8 (baseline -> this run)") != std::string::npos);
}

TEST_CASE("bench-data drains the loader's ring in warmup, and windows can be given a minimum length") {
  const auto dir = tbtest::scratch("tour-bench-data");
  const auto file = tbtest::tiny_profile(dir);
  const auto r = tbtest::run_cli("bench-data -q -c '" + file + "' --set data.workers=2 --set data.prefetch_factor=3" +
                                 " --set measure.min_window_s=0.02 --out '" + (dir / "d.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "d.json");
  CHECK(tbtest::schema_errors(j).empty());
  // The ring's batches were ready before the first was asked for: warmup takes them all first.
  const int slots = j["effective"]["loader_slots"];
  CHECK(slots == 6);
  CHECK(j["results"]["warmup_batches_done"] == 1 + slots);
  const int batches = j["results"]["window_batches"];
  CHECK(batches >= 2);  // measure.measured_batches is the least
  for (const auto& w : j["results"]["repeats"]) CHECK(w["samples"] == 4 * batches);
  CHECK(j["measure"]["min_window_s"] == 0.02);
}

// With a model too: the workers fill the ring while the run is set up, and windows served from
// it would hide an input-bound loop; warmup takes those batches beyond the profile's.
TEST_CASE("run's warmup takes the batches the loader's ring filled before the first was asked for") {
  const auto dir = tbtest::scratch("tour-run-warmup");
  const auto file = tbtest::tiny_profile(dir);
  const auto r = tbtest::run_cli("run -q -c '" + file + "' --set data.workers=2 --set data.prefetch_factor=3" +
                                 " --out '" + (dir / "r.json").string() + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto j = tbtest::read_json(dir / "r.json");
  const int slots = j["effective"]["loader_slots"];
  CHECK(slots == 6);
  CHECK(j["results"]["warmup_batches_done"] == 1 + slots);
  // Without workers the loader reads on demand: nothing to take.
  const auto r0 = tbtest::run_cli("run -q -c '" + file + "' --out '" + (dir / "r0.json").string() + "'");
  REQUIRE(r0.code == 0);
  CHECK(tbtest::read_json(dir / "r0.json")["results"]["warmup_batches_done"] == 1);
}

TEST_CASE("gpu-check.sh takes the project's Python by default, and names the module a Python lacks") {
  const auto dir = tbtest::scratch("tour-gpu-check");
  const auto gpu_check = [&](const std::string& env) {
    return tbtest::run_shell(env + " scripts/gpu-check.sh --rehearse --prebuilt '" + dir.string() + "' --out '" +
                             (dir / "out").string() + "'");
  };
  // An interpreter that sees no site-packages at all: no torch, whatever the machine has.
  tbtest::write_text(dir / "bare/python3", "#!/bin/sh\nexec /usr/bin/python3 -I -S \"$@\"\n");
  fs::permissions(dir / "bare/python3", fs::perms::owner_all);
  const auto bare = gpu_check("PYTHON='" + (dir / "bare/python3").string() + "'");
  INFO(bare.output);
  CHECK(bare.code == 1);
  CHECK(bare.output.find("lacks the Python module(s): torch torchvision yaml") != std::string::npos);

  // No PYTHON, a python3 without torch first on PATH: the project's environment is taken, and
  // preflight gets past the modules (to the missing binaries).
  tbtest::write_text(dir / "venv/bin/python", "#!/bin/sh\nexec '" TRAINBENCH_TEST_PYTHON "' \"$@\"\n");
  fs::permissions(dir / "venv/bin/python", fs::perms::owner_all);
  const auto own = gpu_check("env -u PYTHON PATH='" + (dir / "bare").string() + ":'\"$PATH\" TRAINBENCH_VENV='" +
                             (dir / "venv").string() + "'");
  INFO(own.output);
  CHECK(own.code == 1);
  CHECK(own.output.find("python: " + (dir / "venv/bin/python").string()) != std::string::npos);
  CHECK(own.output.find("lacks") == std::string::npos);
  CHECK(own.output.find("no prebuilt binaries") != std::string::npos);
}

// A second call on the warm machine is made from the first's --out, not typed under the clock.
TEST_CASE("gpu-check.sh --continue takes the phases and cases a first call left, and refuses what is not one") {
  const auto dir = tbtest::scratch("tour-gpu-check-continue");
  const auto kit = [&](const std::string& args) { return tbtest::run_shell("scripts/gpu-check.sh " + args); };
  const auto none = kit("--continue '" + (dir / "none").string() + "' --plan");
  INFO(none.output);
  CHECK(none.code == 2);
  CHECK(none.output.find("holds no skipped.txt and cut.txt of a first call") != std::string::npos);
  tbtest::write_text(dir / "first/skipped.txt", "imagenet\n");
  tbtest::write_text(dir / "first/cut.txt", "resnet50\n");
  tbtest::write_text(dir / "first/gpu-tests-left.txt", "copy stream delivers every batch intact, with slow and fast steps\n");
  const auto both = kit("--continue '" + (dir / "first").string() + "' --only tests --plan");
  INFO(both.output);
  CHECK(both.code == 2);
  CHECK(both.output.find("no --only") != std::string::npos);
  const auto plan = kit("--quick --budget 300 --continue '" + (dir / "first").string() + "' --plan");
  INFO(plan.output);
  CHECK(plan.code == 0);
  CHECK(plan.output.find("phases tests imagenet resnet50 probe; the test cases of " +
                         (dir / "first/gpu-tests-left.txt").string()) != std::string::npos);
  // The plan lists what the second call runs (data joins for the phases that read the sets).
  for (const char* phase : {"data", "tests", "resnet50", "imagenet", "probe"})
    CHECK(plan.output.find(std::string("  ") + phase + " ") != std::string::npos);
  CHECK(plan.output.find("  ladder ") == std::string::npos);
  // The first call's pack: what comes back when the warm machine is gone.
  REQUIRE(tbtest::run_shell("tar -C '" + dir.string() + "' -czf '" + (dir / "first.tar.gz").string() + "' first").code == 0);
  const auto packed = kit("--quick --budget 300 --continue '" + (dir / "first.tar.gz").string() + "' --plan");
  INFO(packed.output);
  CHECK(packed.code == 0);
  CHECK(packed.output.find("phases tests imagenet resnet50 probe; the test cases of ") != std::string::npos);
  CHECK(packed.output.find("first/gpu-tests-left.txt") != std::string::npos);
  tbtest::write_text(dir / "not-a-pack.tar.gz", "text");
  const auto bad = kit("--continue '" + (dir / "not-a-pack.tar.gz").string() + "' --plan");
  INFO(bad.output);
  CHECK(bad.code == 2);
  CHECK(bad.output.find("is neither a folder nor a .tar.gz of one") != std::string::npos);
}

// The kit gives the cases this file names their own caps; a name that matches no case (a renamed
// test) would silently leave that case at the default 30 s.
TEST_CASE("gpu-tests-budget.txt names GPU test cases that exist, each with a cap in seconds") {
  std::set<std::string> gpu;
  for (const auto& t : Catch::getRegistryHub().getTestCaseRegistry().getAllTests())
    if (std::find(t.tags.begin(), t.tags.end(), "gpu") != t.tags.end()) gpu.insert(t.name);
  REQUIRE(!gpu.empty());
  std::ifstream in(tbtest::source_dir() / "scripts/gpu-tests-budget.txt");
  REQUIRE(in);
  int listed = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    INFO(line);
    const auto tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    const std::string secs = line.substr(0, tab), name = line.substr(tab + 1);
    CHECK(!secs.empty());
    CHECK(std::all_of(secs.begin(), secs.end(), [](unsigned char c) { return std::isdigit(c) != 0; }));
    CHECK(gpu.count(name) == 1);
    ++listed;
  }
  CHECK(listed > 0);
}

// A reader gone before the last write: the summary's write fails with EPIPE and the run still
// ends as itself. The same disposition keeps a rank alive, to fail with an error and a report,
// when a dead peer's socket refuses a Gloo or store write (SIGPIPE's default would kill it).
TEST_CASE("a reader that goes away does not kill a run: SIGPIPE is ignored") {
  const auto dir = tbtest::scratch("tour-sigpipe");
  const auto file = tbtest::tiny_profile(dir);
  // `true` exits at once; the run writes its summary to stdout seconds later.
  const auto rc = dir / "rc";
  const auto r = tbtest::run_shell("{ \"$TB\" run -c '" + file + "' 2>/dev/null; echo $? > '" + rc.string() + "'; } | true");
  INFO(r.output);
  std::ifstream in(rc);
  int code = -1;
  in >> code;
  CHECK(code == 0);  // 141 (128 + SIGPIPE) before
  CHECK(fs::exists(dir / "tiny.json"));
}
