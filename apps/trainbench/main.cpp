// Command-line wiring only: parse, call the command, map exceptions to exit codes in one place.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <map>

#include "trainbench/commands/commands.hpp"
#include "trainbench/history/gate.hpp"
#include "trainbench/history/history.hpp"
#include "trainbench/report/compare.hpp"
#include "trainbench/report/ladder.hpp"
#include "trainbench/report/plan.hpp"
#include "trainbench/timeline/timeline.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/interrupt.hpp"
#include "trainbench/util/log.hpp"
#include "trainbench/util/text.hpp"

namespace {

std::string joined_command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) out += (i ? " " : "") + std::string(argv[i]);
  return out;
}

constexpr const char* quiet_help = "only warnings, errors and where the results were written";

// with_model: run has a model (weights to save, a rate to scale against); bench-data has none.
void add_run_options(CLI::App& cmd, trainbench::run_request& req, bool config_required, bool with_model) {
  auto* opt = cmd.add_option("--config,-c", req.configs,
                             "profile YAML file; several: each in fresh processes, interleaved process by process");
  if (config_required) opt->required();
  cmd.add_option("--processes", req.processes,
                 "measure in N fresh processes, pooled into one report (default: the profile's measure.processes)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--set", req.sets, "override a key: key.path=value (repeatable)");
  cmd.add_option("--out,-o", req.out, "report path (overrides report.path)");
  cmd.add_flag("--quiet,-q", req.quiet, quiet_help);
  cmd.add_flag("--strict", req.strict, "treat requested-but-ineffective switches as errors");
  cmd.add_option("--trace", req.trace,
                 "write a Chrome trace-event JSON of every measured batch (Perfetto, chrome://tracing); {rank} "
                 "becomes the rank; with several processes, {process} the process (else -process<k> before the "
                 "extension) (overrides measure.trace)");
  if (!with_model) return;
  cmd.add_option("--baseline", req.baseline,
                 "data-parallel runs: a report of the same profile at world size 1, for scaling efficiency");
  cmd.add_option("--save-weights", req.save_weights,
                 "write the model's state dict (torch.load-able) after the run; {rank} becomes the rank, "
                 "{process} the process (else -process<k> before the extension with several)");
}

// A first word that is neither an option nor a command is a misspelt command: say which was meant.
bool unknown_command(int argc, char** argv, const CLI::App& app) {
  if (argc < 2 || argv[1][0] == '-') return false;
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  const std::string word = argv[1];
  if (std::find(names.begin(), names.end(), word) != names.end()) return false;
  const std::string hint = trainbench::closest_match(word, names);
  trainbench::log_error("unknown command '" + word + "'" + (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                        " Commands: " + trainbench::join(names, ", ") + " (trainbench --help)");
  return true;
}

// The change-point parameters history add and show share.
void add_change_point_options(CLI::App& cmd, trainbench::e_divisive_params& p) {
  cmd.add_option("--max-p", p.max_p, "significance level of a change point (default 0.001)");
  cmd.add_option("--window", p.window, "runs per E-Divisive window (default 50)");
  cmd.add_option("--min-segment", p.min_segment,
                 "fewest runs a level needs on either side of a change point (default 3; 1: any)");
  cmd.add_option_function<double>(
      "--min-change", [&p](double pct) { p.min_magnitude = pct / 100; },
      "smallest change in percent a change point keeps (default 0)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace trainbench;
  ignore_broken_pipes();
  CLI::App app{"trainbench: how fast your ResNet training loop runs, and which optimisation buys how much"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "print versions of trainbench, LibTorch, CUDA, cuDNN and NVTX status");

  run_request top;
  add_run_options(app, top, false, true);

  run_request run_req;
  auto* run = app.add_subcommand("run", "run a profile and write a report");
  add_run_options(*run, run_req, true, true);
  // The processes' own (run --processes, a ladder's rounds): each is a fresh `run` that pools
  // its windows with the earlier processes of its profile here.
  run->add_option("--pool-state", run_req.pool_state, "")->group("");
  run->add_option("--process", run_req.process, "")->group("");

  run_request data_req;
  auto* bench_data = app.add_subcommand("bench-data", "run only the loader and the transfer (no model)");
  add_run_options(*bench_data, data_req, true, false);
  bench_data->add_option("--pool-state", data_req.pool_state, "")->group("");
  bench_data->add_option("--process", data_req.process, "")->group("");

  bottleneck_request neck;
  auto* bottleneck =
      app.add_subcommand("bottleneck", "is the loop input-bound? the profile against the same step on a reused batch");
  bottleneck->add_option("--config,-c", neck.config, "profile YAML file")->required();
  bottleneck->add_option("--set", neck.sets, "override a key: key.path=value (repeatable)");
  bottleneck->add_option("--out,-o", neck.out, "folder for loop.json, ceiling.json and bottleneck.json");
  bottleneck->add_option("--rounds", neck.rounds, "interleaved rounds of both sides (default 3)");
  bottleneck->add_option("--threshold", neck.threshold_pct, "smallest gap in percent that counts (default 3)");
  bottleneck->add_option("--alpha", neck.alpha, "significance level of the Mann-Whitney U test (default 0.05)");
  bottleneck->add_option("--trace", neck.trace,
                         "trace of the loop (Chrome trace-event JSON); the ceiling's goes beside it, -ceiling added");
  bottleneck->add_flag("--quiet,-q", neck.quiet, quiet_help);

  fusion_bench_request fb;
  auto* fusion_bench = app.add_subcommand(
      "fusion-bench", "would MLPerf's convolution fusions pay? the model's batch norm + ReLU -> convolution pairs, "
                      "fused against what backend.compile runs, per shape, on the profile's GPU");
  fusion_bench->add_option("--config,-c", fb.config, "profile YAML file")->required();
  fusion_bench->add_option("--set", fb.sets, "override a key: key.path=value (repeatable)");
  fusion_bench->add_option("--out,-o", fb.out, "also write the table as JSON here");
  fusion_bench->add_option("--rounds", fb.rounds, "alternating rounds of both sides per shape (default 5)");
  fusion_bench->add_option("--calls", fb.calls, "calls per side and round, timed together (default 10)");
  fusion_bench->add_flag("--autotune", fb.autotune,
                         "time every plan cuDNN builds for the fused graphs and keep the fastest (slower to start)");

  std::vector<std::string> validate_files;
  auto* validate = app.add_subcommand("validate", "check profiles; one line per error");
  validate->add_option("files", validate_files, "profile files")->required();

  std::string show_config;
  std::vector<std::string> show_sets;
  auto* show = app.add_subcommand("show", "print the fully resolved profile as YAML");
  show->add_option("--config,-c", show_config, "profile YAML file")->required();
  show->add_option("--set", show_sets, "override a key: key.path=value (repeatable)");

  make_dataset_request ds;
  auto* make_ds = app.add_subcommand("make-dataset", "write a generated dataset in a real dataset's file layout");
  make_ds->add_option("kind", ds.kind, "dataset layout: cifar10 (random pixels) | imagefolder (dead-leaves JPEGs)")
      ->required();
  make_ds->add_option("--out", ds.out, "output folder")->required();
  make_ds
      ->add_option("--samples", ds.samples,
                   "cifar10: training samples, at most 10 million (the test split gets a fifth)")
      ->capture_default_str();
  make_ds->add_option("--classes", ds.classes, "imagefolder: class folders")->capture_default_str();
  make_ds->add_option("--per-class", ds.per_class, "imagefolder: training JPEGs per class; val/ gets a tenth")
      ->capture_default_str();
  make_ds->add_option("--seed", ds.seed, "random seed")->capture_default_str();

  compare_request cmp;
  auto* compare = app.add_subcommand("compare", "compare two reports or folders of reports; exit 1 on a regression");
  compare->add_option("base", cmp.base, "baseline report file or folder")->required();
  compare->add_option("candidate", cmp.candidate, "candidate report file or folder")->required();
  compare->add_option("--threshold", cmp.options.threshold_pct, "smallest change in percent that counts (default 3)");
  compare->add_option("--alpha", cmp.options.alpha, "significance level of the Mann-Whitney U test (default 0.05)");
  compare->add_flag("!--no-family-correction", cmp.options.family_correction,
                    "test each profile at alpha on its own (default: Holm's correction across the profiles)");
  compare
      ->add_option("--level", cmp.options.level,
                   "unit of evidence: process (each process's median window; default) or window (every window "
                   "independent: only for windows measured in one process)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, evidence_level>{{"process", evidence_level::process},
                                                                                {"window", evidence_level::window}}));
  compare->add_option("--format", cmp.format, "text | markdown | json")
      ->check(CLI::IsMember({"text", "markdown", "json"}));

  ladder_request lad;
  auto* ladder = app.add_subcommand("ladder", "run profiles in order and print the optimisation ladder");
  ladder->add_option("profiles", lad.inputs, "a folder of profiles or profile files")->required();
  ladder->add_option("--out,-o", lad.out,
                     "folder for reports, ladder.md and ladder.svg (default reports/<the profiles' folder name>)");
  ladder->add_option("--set", lad.sets, "override a key in every rung: key.path=value (repeatable)");
  ladder->add_option("--rounds,--processes", lad.rounds,
                     "fresh processes of every rung, interleaved round by round (default 5: 5 against 5 processes "
                     "can reach p = 0.008)");
  ladder->add_flag("--shuffle", lad.shuffle, "a new random order of the rungs in every round (random interleaving)");
  ladder->add_option("--shuffle-seed", lad.shuffle_seed, "seed of --shuffle's orders (default 1)");
  ladder->add_option("--reference", lad.reference,
                     "rung samples/s to mark beside the bars of ladder.svg, one 'rung value' a line (default: the "
                     "numbers the profiles' header comments give)");
  ladder->add_flag("--quiet,-q", lad.quiet, quiet_help);

  plan_request pl;
  auto* plan = app.add_subcommand("plan", "how many processes and windows a time budget should buy, from a report");
  plan->add_option("report", pl.report,
                   "a report of two or more fresh processes (run --processes N), or a folder of reports of one profile")
      ->required();
  plan->add_option("--budget", pl.budget, "time for one side of a comparison: 90s, 10m, 1.5h (default 10m)");
  plan->add_option("--alpha", pl.alpha, "significance level the process-level test must reach (default 0.05)");
  plan->add_option("--format", pl.format, "text | json")->check(CLI::IsMember({"text", "json"}));

  timeline_request tl;
  auto* timeline = app.add_subcommand("timeline", "draw a few batches of a --trace file as a Gantt chart (SVG)");
  timeline->add_option("trace", tl.trace, "a trace written by --trace")->required();
  timeline->add_option("--out,-o", tl.out, "SVG file to write (default timeline.svg)");
  timeline->add_option("--batches", tl.batches, "A:B draws batches A to B - 1 (default: the first three traced)");

  auto* history = app.add_subcommand("history", "keep runs in a database and find change points over commits");
  history->require_subcommand(1);
  history_add_request hadd;
  auto* history_add = history->add_subcommand("add", "import run reports (files or folders), idempotently");
  history_add->add_option("reports", hadd.inputs, "report files or folders of reports")->required();
  history_add->add_option("--db", hadd.db,
                          "SQLite file or postgresql:// URL (default: $TRAINBENCH_HISTORY_DB, else "
                          "~/.local/share/trainbench/history.sqlite)");
  history_add->add_option("--commit", hadd.commit, "the commit measured (default: CI variables, else git)");
  history_add->add_option("--branch", hadd.branch, "its branch (default: CI variables, else git)");
  history_add->add_option("--time", hadd.time, "when, ISO 8601 or Unix seconds (default: each report's date)");
  history_add->add_flag("--quiet,-q", hadd.quiet, quiet_help);
  add_change_point_options(*history_add, hadd.params);
  history_show_request hshow;
  auto* history_show = history->add_subcommand("show", "the series, their runs and change points; charts with --out");
  history_show->add_option("--db", hshow.db, "SQLite file or postgresql:// URL (default as for add)");
  history_show->add_option("--series", hshow.series, "a profile name or series id (repeatable; default: all)");
  history_show->add_option("--branch", hshow.branch, "branch to show (default: each series' branch with most runs)");
  history_show->add_option("--out,-o", hshow.out, "folder for index.html and one SVG chart per series");
  history_show->add_option("--format", hshow.format, "text | json")->check(CLI::IsMember({"text", "json"}));
  history_show->add_option("--last", hshow.last, "runs per series in the text table (default 10)");
  add_change_point_options(*history_show, hshow.params);
  // Hidden (empty group): scripts/otava-crosscheck.py's switch, documented in docs/history.md.
  history_show->add_flag("--otava-compatible", hshow.otava_compatible, "")->group("");
  history_gate_request hgate;
  auto* history_gate = history->add_subcommand(
      "gate", "a pull request's runs against the branch's runs since the last change point; exit 1 on SLOWER");
  history_gate->add_option("candidates", hgate.candidates, "the candidate's report files or folders")->required();
  history_gate->add_option("--db", hgate.db, "SQLite file or postgresql:// URL (default as for add)");
  history_gate->add_option("--branch", hgate.branch, "the baseline branch (default main)");
  history_gate->add_option("--format", hgate.format, "text | markdown | json")
      ->check(CLI::IsMember({"text", "markdown", "json"}));
  history_gate->add_option("--threshold", hgate.threshold_pct,
                           "smallest change in percent that counts as FASTER or SLOWER (default 3)");
  history_gate->add_option("--alpha", hgate.alpha, "significance level, across series with Holm (default 0.05)");
  history_gate->add_option("--baseline-runs", hgate.baseline_runs,
                           "the latest runs since the last change point that form the baseline (default 50)");
  history_gate->add_option("--min-runs", hgate.min_runs,
                           "fewer baseline runs than this: the threshold rule instead of the test (default 5)");
  history_gate->add_flag("--require-baseline", hgate.require_baseline,
                         "a candidate series without baseline runs fails the gate (default: a warning)");
  add_change_point_options(*history_gate, hgate.params);

  // Hidden (empty group): the hook of scripts/check-torchvision.py, documented in docs/models.md.
  logits_request logits_req;
  auto* logits = app.add_subcommand("logits", "eval-mode logits of the profile's model for a saved input tensor");
  logits->group("");
  logits->add_option("--config,-c", logits_req.config, "profile YAML file")->required();
  logits->add_option("--set", logits_req.sets, "override a key: key.path=value (repeatable)");
  logits->add_option("--input", logits_req.input, "N x 3 x H x W float32 tensor saved by torch.save")->required();
  logits->add_option("--out,-o", logits_req.out, "where the logits go (torch.load-able)")->required();

  if (unknown_command(argc, argv, app)) return exit_code::bad_input;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? exit_code::ok : exit_code::bad_input;
  }

  const std::string command_line = joined_command_line(argc, argv);
  // -q before the command means the same as after it.
  for (bool* quiet : {&run_req.quiet, &data_req.quiet, &neck.quiet, &lad.quiet, &hadd.quiet})
    *quiet = *quiet || top.quiet;
  try {
    if (version) {
      std::cout << version_text();
      return exit_code::ok;
    }
    if (*run) {
      run_req.command_line = command_line;
      return run_command(run_req);
    }
    if (*bench_data) {
      data_req.command_line = command_line;
      data_req.data_only = true;
      return run_command(data_req);
    }
    if (*bottleneck) {
      neck.command_line = command_line;
      return bottleneck_command(neck);
    }
    if (*fusion_bench) return fusion_bench_command(fb);
    if (*validate) return validate_command(validate_files);
    if (*show) return show_command(show_config, show_sets);
    if (*make_ds) return make_dataset_command(ds);
    if (*compare) return compare_command(cmp);
    if (*plan) return plan_command(pl);
    if (*timeline) return timeline_command(tl);
    if (*logits) return logits_command(logits_req);
    if (*history_add) return history_add_command(hadd);
    if (*history_show) return history_show_command(hshow);
    if (*history_gate) return history_gate_command(hgate);
    if (*ladder) {
      lad.command_line = command_line;
      return ladder_command(lad);
    }
    if (!top.configs.empty()) {
      top.command_line = command_line;
      return run_command(top);
    }
    std::cout << app.help();
    return exit_code::bad_input;
  } catch (const config_error& e) {
    trainbench::log_error(e.what());
    return exit_code::bad_input;
  } catch (const input_error& e) {
    trainbench::log_error(e.what());
    return exit_code::bad_input;
  } catch (const interrupted_error& e) {
    trainbench::log_error(e.what());
    return exit_code::interrupted;
  } catch (const std::exception& e) {
    trainbench::log_error(e.what());
    return exit_code::failed;
  }
}
