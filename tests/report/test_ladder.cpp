#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "helpers.hpp"
#include "trainbench/report/ladder.hpp"

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
}  // namespace

TEST_CASE("ladder table: change over previous and first, failed rungs shown") {
  std::vector<ladder_rung> rungs{{"00-baseline", "workers 0", 100.0, "", {}},
                                 {"01-workers", "8 workers", 150.0, "", {}},
                                 {"02-oom", "batch 4096", std::nullopt, "CUDA out of memory", {}},
                                 {"03-amp", "fp16 | autocast", 300.0, "", {}}};
  const std::string md = ladder_markdown(rungs);
  CHECK(md.find("| 01-workers | 8 workers | 150.0 | +50.0% | +50.0% |") != std::string::npos);
  CHECK(md.find("failed: CUDA out of memory") != std::string::npos);
  CHECK(md.find("| 03-amp | fp16 \\| autocast | 300.0 | +100.0% | +200.0% |") != std::string::npos);
  int bars = 0;
  CHECK(well_formed_xml(ladder_svg(rungs, "t <&> \"q\""), bars));
  CHECK(bars == 4);
}

TEST_CASE("a step up the ladder carries its 95% interval when the two rungs have the windows for one") {
  ladder_rung a{"00-baseline", "base", 100.0, "", {99, 100, 101, 100.5, 99.5}};
  ladder_rung b{"01-workers", "8 workers", 150.0, "", {149, 150, 151, 150.5, 149.5}};
  ladder_rung c{"02-pin", "pinned", 151.0, "", {151, 152}};  // 5 vs 2 windows: P(U = 0) = 1/21, no 95% interval
  const std::string md = ladder_markdown({a, b, c});
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
}

TEST_CASE("ladder runs the CPU profiles in natural order and writes md and svg") {
  const auto dir = tbtest::scratch("ladder");
  const auto r = tbtest::run_cli(
      "ladder configs/cpu --out '" + dir.string() +
      "' --quiet --set measure.warmup_batches=1 --set measure.measured_batches=1 --set measure.repeats=1"
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
  std::ifstream md_in(dir / "ladder.md");
  std::stringstream md;
  md << md_in.rdbuf();
  for (const auto& p : profiles) {
    const auto stem = std::filesystem::path(p).stem().string();
    CHECK(md.str().find("| " + stem + " |") != std::string::npos);
    CHECK(std::filesystem::exists(dir / (stem + ".json")));
  }
  CHECK(r.output.find("vs previous") != std::string::npos);
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
