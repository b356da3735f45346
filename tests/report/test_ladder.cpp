#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "helpers.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/report/ladder.hpp"
#include "trainbench/util/fs.hpp"

using namespace trainbench;

namespace {
// Minimal well-formedness check: every tag closed in order, attributes quoted.
bool well_formed_xml(const std::string& s, int& bars) {
  std::vector<std::string> stack;
  bars = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '<') continue;
    const std::size_t end = s.find('>', i);
    if (end == std::string::npos) return false;
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end;
    if (tag.empty()) return false;
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (std::count(tag.begin(), tag.end(), '"') % 2) return false;
    if (tag.find("class=\"bar") != std::string::npos) ++bars;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return false;
      stack.pop_back();
    } else if (tag.back() != '/') {
      stack.push_back(tag.substr(0, tag.find(' ')));
    }
  }
  return stack.empty();
}
std::string read(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string row_of(const std::string& md, const std::string& rung) {
  const auto at = md.find("| " + rung + " |");
  return at == std::string::npos ? "" : md.substr(at, md.find('\n', at) - at);
}

}  // namespace

TEST_CASE("ladder table: change over previous and first, failed rungs shown") {
  std::vector<ladder_rung> rungs{{"00-baseline", "workers 0", 100.0, "", {}, {}, {}, false, {}},
                                 {"01-workers", "8 workers", 150.0, "", {}, {}, {}, false, {}},
                                 {"02-oom", "batch 4096", std::nullopt, "CUDA out of memory", {}, {}, {}, false, {}},
                                 {"03-amp", "fp16 | autocast", 300.0, "", {}, {}, {}, false, {}}};
  const std::string md = ladder_markdown(rungs);
  CHECK(md.find("| 01-workers | 8 workers | 150.0 | +50.0% | +50.0% |") != std::string::npos);
  CHECK(md.find("failed: CUDA out of memory") != std::string::npos);
  CHECK(md.find("| 03-amp | fp16 \\| autocast | 300.0 | +100.0% | +200.0% |") != std::string::npos);
  int bars = 0;
  CHECK(well_formed_xml(ladder_svg(rungs, "t <&> \"q\""), bars));
  CHECK(bars == 4);
}

TEST_CASE("a step up the ladder carries its 95% interval when the two rungs have the processes for one") {
  // One window per process: the windows are the process medians the step's test ranks.
  ladder_rung a{"00-baseline", "base", 100.0, "", {99, 100, 101, 100.5, 99.5}, {}, {}, false, {0, 1, 2, 3, 4}};
  ladder_rung b{"01-workers", "8 workers", 150.0, "", {149, 150, 151, 150.5, 149.5}, {}, {}, false, {0, 1, 2, 3, 4}};
  ladder_rung c{"02-pin", "pinned", 151.0, "", {151, 152}, {}, {}, false, {0, 1}};  // 5 vs 2: P(U = 0) = 1/21
  // Five windows of one process against five of another: one observation each, never decided.
  ladder_rung d{"03-one", "one process", 160.0, "", {159, 160, 161, 160.5, 159.5}, {}, {}, false, {0, 0, 0, 0, 0}};
  ladder_rung e{"04-one", "one process", 200.0, "", {199, 200, 201, 200.5, 199.5}, {}, {}, false, {0, 0, 0, 0, 0}};
  const std::string md = ladder_markdown({a, b, c, d, e});
  const auto row = [&](const std::string& rung) {
    const auto at = md.find("| " + rung + " |");
    return md.substr(at, md.find('\n', at) - at);
  };
  INFO(md);
  // 5 vs 5: the 3rd smallest and 3rd largest pairwise ratios, 150.5/99.5 - 1 > change > 149.5/100.5 - 1.
  CHECK(row("01-workers").find("+50.0% [+48.") != std::string::npos);
  CHECK(row("01-workers").find("%, +51.") != std::string::npos);
  CHECK(row("01-workers").find("] FASTER") != std::string::npos);  // compare's verdict at 3%, alpha 0.05
  CHECK(row("02-pin").find("[") == std::string::npos);
  CHECK(row("02-pin").find("AMBIGUOUS (5 vs 2 processes)") != std::string::npos);
  CHECK(row("04-one").find("+25.0% AMBIGUOUS (1 vs 1 processes)") != std::string::npos);
}

TEST_CASE("noisy rungs are flagged at cv 10% and 25%, and rungs whose switches did nothing are marked") {
  ladder_rung quiet{"00-base", "base", 100.0, "", {99, 100, 101}, {}, {}, false, {}};
  ladder_rung noisy{"01-noisy", "noisy", 100.0, "", {85, 100, 115}, {}, {}, false, {}};  // cv 15%
  ladder_rung wild{"02-wild", "wild", 66.0, "", {296, 7, 66}, {}, {}, false, {}};        // cv 124%
  ladder_rung graph{"03-graph",
                    "CUDA graph",
                    100.0,
                    "",
                    {100, 100, 100},
                    {"on the CPU (no CUDA device here)"},
                    {"backend.cuda_graph: requested but ineffective: the device is cpu"},
                    true,
                    {}};
  const std::string md = ladder_markdown({quiet, noisy, wild, graph});
  INFO(md);
  CHECK(row_of(md, "00-base").find("cv") == std::string::npos);
  CHECK(row_of(md, "01-noisy").find("| 100.0 (cv 15%) |") != std::string::npos);
  CHECK(row_of(md, "02-wild").find("| 66.0 (cv 124%: unreliable) |") != std::string::npos);
  CHECK(row_of(md, "03-graph").find("on the CPU (no CUDA device here); **no effect here**: backend.cuda_graph") !=
        std::string::npos);
  int bars = 0;
  const std::string svg = ladder_svg({quiet, noisy, wild, graph}, "t");
  CHECK(well_formed_xml(svg, bars));
  CHECK(svg.find("class=\"bar no-effect\"") != std::string::npos);
  CHECK(svg.find("(no effect here)") != std::string::npos);
}

TEST_CASE("the chart is wide enough for its longest labels") {
  ladder_rung top{"07-stream-overlap-with-a-long-name", "x", 31730.4, "", {}, {}, {}, false, {}};
  const std::string svg = ladder_svg({top}, "trainbench ladder");
  auto number_after = [&](const std::string& what, std::size_t from = 0) {
    return std::stoi(svg.substr(svg.find(what, from) + what.size()));
  };
  const int width = number_after("width=\"", svg.find("<svg"));
  // The bar spans the chart; its label starts after it and must end inside the picture.
  const int value_x = number_after("<text class=\"value\" x=\"");
  CHECK(value_x + 8 * static_cast<int>(std::string("31730.4 samples/s").size()) <= width);
  const int name_x = number_after("<text class=\"name\" x=\"");
  CHECK(name_x >= 8 * static_cast<int>(top.rung.size()));  // right-aligned at x: fits left of it
  CHECK(count(svg, "<g class=\"rung\"") == 1);
}

TEST_CASE("ladder runs the CPU profiles in natural order, in rounds of fresh processes, and writes md and svg") {
  const auto dir = tbtest::scratch("ladder");
  const auto r = tbtest::run_cli(
      "ladder configs/cpu --rounds 1 --out '" + dir.string() +
      "' --quiet --set measure.warmup_batches=1 --set measure.measured_batches=1 --set measure.repeats=2"
      " --set data.image_size=16 --set train.batch_size=4");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto profiles = ladder_profiles({(tbtest::source_dir() / "configs/cpu").string()});
  std::ifstream svg_in(dir / "ladder.svg");
  std::stringstream svg;
  svg << svg_in.rdbuf();
  int bars = 0;
  CHECK(well_formed_xml(svg.str(), bars));
  CHECK(bars == static_cast<int>(profiles.size()));
  CHECK(count(svg.str(), "<g class=\"rung\"") == profiles.size());
  const std::string md = read(dir / "ladder.md");
  for (const auto& p : profiles) {
    const auto stem = std::filesystem::path(p).stem().string();
    INFO(stem);
    CHECK(md.find("| " + stem + " |") != std::string::npos);
    const auto report = tbtest::read_json(dir / (stem + ".json"));
    CHECK(tbtest::schema_errors(report).empty());
    // Measured by a `run` of its own, not inside the ladder's process.
    CHECK(report["results"]["repeats"].size() == 2);
    const std::string command = report["context"]["command_line"];
    CHECK(command.find(" run --config configs/cpu/" + stem + ".yaml") != std::string::npos);
    CHECK(command.find("--pool-state") != std::string::npos);
  }
  // --set is shown where it changes what a rung's file says: 01-batch-32 ran at batch 4.
  CHECK(md.find("train.batch_size 32 -> 4") != std::string::npos);
  // ... and so the rung is a rerun of the one before, which the table says.
  CHECK(md.find("**no effect here**: the same work as 00-baseline once --set is applied") != std::string::npos);
  CHECK(md.find("Each rung ran in 1 fresh process, the rungs in the order listed") != std::string::npos);
  CHECK(r.output.find("ladder.md") != std::string::npos);    // -q still says where the results are
  CHECK(r.output.find("vs previous") == std::string::npos);  // but not the table
}

TEST_CASE("the same profile twice in one ladder is SAME, never FASTER or SLOWER") {
  // Why this cannot flake, on any machine and under any load: each copy runs in 8 fresh
  // processes, and every round runs the two in a new random order. Nothing is carried from one
  // process to the next, so whatever the machine does (other jobs, clock changes, a slow
  // moment) falls on either copy with the same chance: the two sets of windows are
  // exchangeable. FASTER or SLOWER needs both a Mann-Whitney p below 0.001, which exchangeable
  // windows reach with probability 0.001 at most (8 against 8 can reach 1.6e-4), and medians
  // more than 10% apart. Were windows carried over between rungs (one process for the whole
  // ladder), the copy measured second would pay for what the first left behind in every round.
  const auto dir = tbtest::scratch("ladder-twice");
  tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "rungs/1-first.yaml", "extends: ../tiny.yaml\nname: copy-a\n");
  tbtest::write_text(dir / "rungs/2-again.yaml", "extends: ../tiny.yaml\nname: copy-b\n");
  const auto r = tbtest::run_cli("ladder '" + (dir / "rungs").string() + "' --out '" + (dir / "out").string() +
                                 "' --rounds 8 --shuffle --quiet --set measure.repeats=1"
                                 " --set measure.min_window_s=0.05");
  INFO(r.output);
  REQUIRE(r.code == 0);
  pair_row row;
  for (auto [rung, windows, processes] : {std::tuple{"1-first.json", &row.base, &row.base_process},
                                          std::tuple{"2-again.json", &row.candidate, &row.candidate_process}}) {
    const auto report = tbtest::read_json(dir / "out" / rung);
    for (const auto& w : report["results"]["repeats"]) {
      windows->push_back(w["samples_per_s"].get<double>());
      processes->push_back(w["process"].get<int>());
    }
    CHECK(report["results"]["processes"]["count"] == 8);
    CHECK(report["measure"]["processes"] == 8);
  }
  REQUIRE(row.base.size() == 8);
  REQUIRE(row.candidate.size() == 8);
  const pair_row judged = judge(row, 10.0, 0.001);
  INFO(judged.reason);
  CHECK(judged.base_units.size() == 8);  // eight processes a side, each one observation
  CHECK(judged.result != verdict::faster);
  CHECK(judged.result != verdict::slower);
  const std::string md = read(dir / "out/ladder.md");
  CHECK(md.find("**no effect here**: the same work as 1-first |") != std::string::npos);
  // The table's step compares the same eight process medians a side (8 against 8 has a 95% interval).
  CHECK(row_of(md, "2-again").find("% [") != std::string::npos);
}

TEST_CASE("without --out a ladder writes to reports/<the profiles' folder>, so ladders keep their results") {
  const auto dir = tbtest::scratch("ladder-default-out");
  tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "my-rungs/1-a.yaml", "extends: ../tiny.yaml\nname: a\n");
  const auto r = tbtest::run_shell("cd '" + dir.string() + "' && \"$TB\" ladder my-rungs --rounds 1 --quiet");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(std::filesystem::exists(dir / "reports/my-rungs/1-a.json"));
  CHECK(std::filesystem::exists(dir / "reports/my-rungs/ladder.md"));
}

TEST_CASE("a ladder whose binary is rebuilt (deleted) meanwhile still runs every rung with the binary it started as") {
  const auto dir = tbtest::scratch("ladder-rebuilt");
  tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "rungs/1-a.yaml", "extends: ../tiny.yaml\nname: a\n");
  tbtest::write_text(dir / "rungs/2-b.yaml", "extends: ../tiny.yaml\nname: b\n");
  const std::filesystem::path copy = dir / "tb-copy";
  std::filesystem::copy_file(tbtest::exe(), copy);
  // The copy is removed as soon as the ladder runs from it, as a relink does: the rungs still
  // to come (here at least the second round's) must start all the same.
  const auto r = tbtest::run_shell(
      "cd '" + dir.string() + "' || exit 2; ./tb-copy ladder rungs --rounds 2 --quiet --out out & pid=$!;" +
      " for i in $(seq 1000); do case $(readlink /proc/$pid/exe) in *tb-copy) break;; esac;" +
      " sleep 0.01; done; rm '" + copy.string() + "'; wait $pid");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(r.output.find("cannot start") == std::string::npos);
  CHECK(std::filesystem::exists(dir / "out/ladder.md"));
  CHECK(tbtest::read_json(dir / "out/2-b.json")["results"]["repeats"].size() == 2 * 2);
}

TEST_CASE("Ctrl-C during a ladder: exit 130, every rung it did not finish says interrupted, no table") {
  const auto dir = tbtest::scratch("ladder-interrupt");
  tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "rungs/1-quick.yaml", "extends: ../tiny.yaml\nname: quick\n");
  tbtest::write_text(dir / "rungs/2-long.yaml",
                     "extends: ../tiny.yaml\nname: long\nmeasure: {measured_batches: 100000}\n");
  const std::string log = (dir / "ladder.log").string();
  // The second rung's warmup line means the first rung has finished its first round.
  const auto r = tbtest::run_shell("\"$TB\" ladder '" + (dir / "rungs").string() + "' --rounds 2 --out '" +
                                   (dir / "out").string() + "' > '" + log + "' 2>&1 & p=$!; i=0; " +
                                   "until [ \"$(grep -c 'warmup:' '" + log + "')\" -ge 2 ] || [ $i -ge 1200 ]; " +
                                   "do sleep 0.1; i=$((i+1)); done; kill -INT $p; wait $p; echo rc=$?");
  INFO(r.output << read(log));
  CHECK(r.output.find("rc=130") != std::string::npos);
  const auto quick = tbtest::read_json(dir / "out/1-quick.json");
  CHECK(quick["status"] == "interrupted");  // one of its two rounds
  CHECK(quick["results"]["stopped_by"] == "interrupted");
  CHECK(quick["results"]["repeats"].size() == 2);
  const auto long_rung = tbtest::read_json(dir / "out/2-long.json");
  CHECK(long_rung["status"] == "interrupted");
  CHECK(long_rung["error"]["kind"] == "interrupted");
  CHECK(tbtest::schema_errors(long_rung).empty());
  CHECK_FALSE(std::filesystem::exists(dir / "out/ladder.md"));
}

TEST_CASE("a failing rung is shown as failed with its reason and the ladder carries on") {
  const auto dir = tbtest::scratch("ladder-fail");
  const auto base = tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "rungs/01-ok.yaml", "extends: ../tiny.yaml\nname: ok\ndescription: fine\n");
  tbtest::write_text(dir / "rungs/02-huge.yaml",
                     "extends: 01-ok.yaml\nname: huge\ndescription: cannot allocate\n"
                     "data: {image_size: 8192, samples: 400}\ntrain: {batch_size: 400}\n");
  tbtest::write_text(dir / "rungs/10-after.yaml", "extends: 01-ok.yaml\nname: after\ndescription: still runs\n");
  // Rung 02's 300 GiB batch buffers are within the bounds but not within the limit: it fails to allocate.
  const auto r = tbtest::run_cli_memory_limited("ladder '" + (dir / "rungs").string() + "' --quiet --out '" +
                                                (dir / "out").string() + "'");
  INFO(r.output);
  CHECK(r.code == 1);
  std::ifstream md_in(dir / "out/ladder.md");
  std::stringstream md;
  md << md_in.rdbuf();
  CHECK(md.str().find("| 02-huge | cannot allocate | failed: ") != std::string::npos);
  CHECK(md.str().find("| 10-after | still runs |") != std::string::npos);
  // Natural order: 10 after 02.
  CHECK(md.str().find("02-huge") < md.str().find("10-after"));
  (void)base;
}

TEST_CASE("ladder.svg: each rung's median with its IQR whisker, the speed-up over the first, reference markers") {
  const std::vector<ladder_rung> rungs{{"00-baseline", "base", 100.0, "", {90, 95, 100, 105, 110}, {}, {}, false, {}},
                                       {"01-workers", "workers", 250.0, "", {240, 250, 260}, {}, {}, false, {}},
                                       {"02-oom", "huge", std::nullopt, "out of memory", {}, {}, {}, false, {}},
                                       {"03-amp", "amp", 300.0, "", {300}, {}, {}, false, {}}};
  const ladder_reference reference{{"00-baseline", 542.7}, {"01-workers", 797.8}, {"09-other", 1.0}};
  const std::string svg = ladder_svg(rungs, "t", reference, "ref.txt");
  INFO(svg);
  int bars = 0;
  CHECK(well_formed_xml(svg, bars));
  CHECK(bars == 4);
  CHECK(count(svg, "<g class=\"rung\"") == 4);
  CHECK(count(svg, "class=\"iqr\"") == 2);  // a single window has no spread to draw
  CHECK(svg.find("IQR 95.0 to 105.0 samples/s over 5 windows") != std::string::npos);
  CHECK(count(svg, "class=\"reference\"") == 2);
  CHECK(svg.find("<title>reference 797.8 samples/s</title>") != std::string::npos);
  CHECK(svg.find(">250.0 samples/s \u00d72.50 \u00b7 reference 797.8 (\u00d71.47)<") != std::string::npos);
  CHECK(svg.find(">300.0 samples/s \u00d73.00<") != std::string::npos);
  CHECK(svg.find("diamond: reference samples/s (ref.txt)") != std::string::npos);
  const std::string plain = ladder_svg(rungs, "t");  // no references: no markers, no word of them
  CHECK(plain.find("reference") == std::string::npos);
}

TEST_CASE("ladder references: a --reference file with bad lines named, and the article's numbers from the header") {
  const auto r = parse_reference("# the article\n00-baseline 542.7\n01-workers: 797.8  # fewer stalls\n\n", "ref.txt");
  CHECK(r == ladder_reference{{"00-baseline", 542.7}, {"01-workers", 797.8}});
  CHECK_THROWS_WITH(parse_reference("00-baseline 542.7\n01-workers fast\n", "ref.txt"),
                    Catch::Contains("ref.txt line 2") && Catch::Contains("rung samples/s"));
  CHECK_THROWS_WITH(parse_reference("a 1\na 2\n", "ref.txt"), Catch::Contains("given twice"));
  CHECK_THROWS_WITH(parse_reference("a -1\n", "ref.txt"), Catch::Contains("line 1"));
  CHECK_THROWS_WITH(parse_reference("# nothing\n", "ref.txt"), Catch::Contains("ref.txt"));

  std::vector<std::string> stems;
  for (const auto& p : ladder_profiles({(tbtest::source_dir() / "configs/ladder").string()}))
    stems.push_back(std::filesystem::path(p).stem().string());
  const auto header = header_reference(read_text_file(tbtest::source_dir() / "configs/ladder/00-baseline.yaml"), stems);
  CHECK(header.size() == 8);
  CHECK(header.at("00-baseline") == 542.7);
  CHECK(header.at("06-compile") == 2704.4);
  CHECK(header.at("07-stream-overlap") == 3173.4);
}

TEST_CASE("ladder --reference: a file that cannot be read or parsed stops the ladder before any rung, exit 2") {
  const auto dir = tbtest::scratch("ladder-reference-bad");
  tbtest::write_text(dir / "ref.txt", "00-baseline lots\n");
  for (const std::string& ref : {(dir / "missing.txt").string(), (dir / "ref.txt").string()}) {
    const auto r =
        tbtest::run_cli("ladder configs/cpu --out '" + (dir / "out").string() + "' --reference '" + ref + "'");
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find(ref) != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir / "out"));
  }
}

TEST_CASE("a misspelt --set or a broken profile stops the ladder before any rung, exit 2, earlier results kept") {
  const auto dir = tbtest::scratch("ladder-bad-input");
  tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "rungs/01-ok.yaml", "extends: ../tiny.yaml\nname: ok\ndescription: fine\n");
  tbtest::write_text(dir / "rungs/02-typo.yaml", "extends: 01-ok.yaml\nname: typo\ntrain: {batchsize: 8}\n");
  tbtest::write_text(dir / "good/01-ok.yaml", "extends: ../tiny.yaml\nname: ok\ndescription: fine\n");
  tbtest::write_text(dir / "out/01-ok.json", "{\"earlier\": true}\n");  // an earlier ladder's result
  const std::string out = " --quiet --out '" + (dir / "out").string() + "'";

  const auto bad_profile = tbtest::run_cli("ladder '" + (dir / "rungs").string() + "'" + out);
  INFO(bad_profile.output);
  CHECK(bad_profile.code == 2);
  CHECK(bad_profile.output.find("1 of 2 profiles cannot run, so no rung ran") != std::string::npos);
  CHECK(bad_profile.output.find("02-typo.yaml") != std::string::npos);
  CHECK(bad_profile.output.find("train.batchsize") != std::string::npos);

  const auto bad_set = tbtest::run_cli("ladder '" + (dir / "good").string() + "' --set train.batchsize=8" + out);
  INFO(bad_set.output);
  CHECK(bad_set.code == 2);
  CHECK(bad_set.output.find("--set train.batchsize=8") != std::string::npos);

  // Neither ran a rung, wrote a table or cleared what was there.
  CHECK(tbtest::read_json(dir / "out/01-ok.json").value("earlier", false));
  CHECK_FALSE(std::filesystem::exists(dir / "out/ladder.md"));
  CHECK_FALSE(std::filesystem::exists(dir / "out/rounds"));
}

TEST_CASE("a rung whose process dies by a signal in a later round reads as failed, naming the signal") {
  // The second process of 02-dies is killed as it starts (a preloaded test library: its state
  // file exists from the first round), as the OOM killer would: it writes no report. Before, the
  // first round's report stood as a result with fewer rounds.
  const auto dir = tbtest::scratch("ladder-signal");
  tbtest::tiny_profile(dir);
  tbtest::write_text(dir / "rungs/01-lives.yaml", "extends: ../tiny.yaml\nname: lives\n");
  tbtest::write_text(dir / "rungs/02-dies.yaml", "extends: ../tiny.yaml\nname: dies\n");
  const auto out = dir / "out";
  const auto preload = [](const std::filesystem::path& trigger) {
    return "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" LD_PRELOAD='" +
           std::string(TRAINBENCH_DIE_WHEN_EXISTS) + "' TB_TEST_DIE_WHEN_EXISTS='" + trigger.string() + "' ";
  };
  const auto r =
      tbtest::run_shell(preload(out / "rounds/02-dies.json") + "\"$TB\" ladder '" + (dir / "rungs").string() +
                        "' --out '" + out.string() + "' --rounds 3 --quiet --set measure.repeats=2");
  INFO(r.output);
  CHECK(r.code == 1);
  const auto dies = tbtest::read_json(out / "02-dies.json");
  CHECK(dies["status"] == "error");
  CHECK(dies["error"]["kind"] == "crashed");
  const std::string message = dies["error"]["message"];
  CHECK(message.find("process 2 of 3 was killed by signal 9") != std::string::npos);
  CHECK(message.find("holds the 1 process(es) before it") != std::string::npos);
  CHECK(tbtest::schema_errors(dies).empty());
  const auto lives = tbtest::read_json(out / "01-lives.json");
  CHECK(lives["status"] == "ok");
  CHECK(lives["results"]["processes"]["count"] == 3);
  const std::string md = read(out / "ladder.md");
  CHECK(row_of(md, "02-dies").find("failed: process 2 of 3 was killed by signal 9") != std::string::npos);
  CHECK(read(out / "ladder.svg").find("class=\"bar failed\"") != std::string::npos);

  // run --processes is the same mechanism: the report says the process died.
  const auto alone = tbtest::run_shell(
      preload(out / "processes/02-dies.json") + "\"$TB\" run -c '" + (dir / "rungs/02-dies.yaml").string() +
      "' --processes 2 --quiet --set measure.repeats=2 --out '" + (out / "02-dies.json").string() + "'");
  INFO(alone.output);
  CHECK(alone.code == 1);
  CHECK(alone.output.find("process 2 of 2 was killed by signal 9") != std::string::npos);
  CHECK(tbtest::read_json(out / "02-dies.json")["error"]["kind"] == "crashed");
}
