#include "trainbench/report/bottleneck.hpp"

#include <cstdio>

#include "trainbench/measure/stats.hpp"

namespace trainbench {

const char* to_string(bound b) {
  switch (b) {
    case bound::input:
      return "INPUT-BOUND";
    case bound::compute:
      return "COMPUTE-BOUND";
    case bound::unexpected:
      return "UNEXPECTED";
    case bound::ambiguous:
      break;
  }
  return "AMBIGUOUS";
}

namespace {

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", 1000.0 * seconds);
  return buf;
}

// The switches of this profile that attack the stage the step waited on.
std::vector<std::string> hints_for(const bottleneck_input& in, const profile& p, double gap_s) {
  std::vector<std::string> h;
  const bool loader_side = in.data_wait_s >= in.h2d_s;
  if (in.data_wait_s + in.h2d_s < 0.5 * gap_s)
    h.push_back("the step's visible waits (data_wait " + ms(in.data_wait_s) + ", h2d " + ms(in.h2d_s) +
                " per batch) explain less than half of the gap (" + ms(gap_s) +
                " per batch): the input work slows the step itself" +
                (in.cuda ? " (host threads, memory bandwidth or device preprocessing)"
                         : " (loader threads share the CPU cores with the intra-op threads)"));
  if (loader_side) {
    if (p.data.workers == 0)
      h.push_back("data.workers: 0 loads on the training thread; worker threads prepare batches while the step runs");
    else
      h.push_back("data.workers: " + std::to_string(p.data.workers) + " cannot keep up (the step waited " +
                  ms(in.data_wait_s) + " per batch); add workers where cores are free");
    if (in.cuda && p.data.preprocess == preprocess_place::host)
      h.push_back("data.preprocess: device ships uint8 images and resizes and normalizes them on the GPU");
    return h;
  }
  if (!in.cuda) return h;
  if (!p.data.pin_memory) h.push_back("data.pin_memory: true (copies from pageable memory are slower and synchronous)");
  if (p.data.pin_memory && !p.transfer.non_blocking && !p.transfer.copy_stream)
    h.push_back("transfer.non_blocking: true lets the host queue the step while the copy runs");
  if (!p.transfer.copy_stream) h.push_back("transfer.copy_stream: true copies the next batch while this one computes");
  if (p.data.preprocess == preprocess_place::host)
    h.push_back("data.preprocess: device sends uint8 images, a quarter of float32's bytes per pixel");
  return h;
}

// Where the true gap lies, which is what a user can act on even when the verdict is AMBIGUOUS.
std::string interval_words(const std::optional<change_interval>& i) {
  if (!i) return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.0f%% CI of the change %+.1f%% to %+.1f%%; ", 100.0 * i->confidence, i->low_pct,
                i->high_pct);
  return buf;
}

std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * share);
  return buf;
}

}  // namespace

bottleneck_finding judge_bottleneck(const bottleneck_input& in, const profile& p, double threshold_pct, double alpha) {
  bottleneck_finding f;
  pair_row row;
  row.name = p.name;
  row.base = in.ceiling;
  row.candidate = in.loop;
  // Both sides ran in this one process, interleaved: they share its luck, so the windows are the
  // units (the process level would need the pair repeated in fresh processes).
  row.level = evidence_level::window;
  f.row = judge(row, threshold_pct, alpha);
  f.share_of_ceiling = f.row.base_median > 0 ? f.row.candidate_median / f.row.base_median : 0.0;
  // SAME and AMBIGUOUS reasons already give the interval; a gap's reason gives the test.
  const bool gap = f.row.result == verdict::slower || f.row.result == verdict::faster;
  const std::string at = "the loop runs at " + percent(f.share_of_ceiling) + " of its ceiling (" +
                         (gap ? interval_words(f.row.interval) : "") + f.row.reason + ")";
  switch (f.row.result) {
    case verdict::slower:
      f.result = bound::input;
      f.explanation = at + ": input costs " + percent(1.0 - f.share_of_ceiling) + " of the throughput";
      f.hints = hints_for(in, p, in.batch_s * (1.0 - f.share_of_ceiling));
      break;
    case verdict::same:
      f.result = bound::compute;
      f.explanation = at +
                      ": input is hidden behind the step, so faster loading would not help; "
                      "the step is what to speed up " +
                      (in.cuda ? std::string("(amp, batch size, channels_last, cuda_graph)")
                               : std::string("(batch size, channels_last, bf16 amp where the CPU has the units)"));
      break;
    case verdict::faster:
      f.result = bound::unexpected;
      f.explanation = at +
                      ": faster than its own ceiling, which input cannot make it; the machine changed "
                      "between windows or the reused batch is not representative. Do not trust this pair";
      break;
    case verdict::ambiguous:
      f.result = bound::ambiguous;
      f.explanation = at + ": cannot tell; raise --rounds or measure.repeats";
      break;
  }
  return f;
}

std::string format_bottleneck(const bottleneck_finding& f, const bottleneck_input& in, const std::string& name) {
  const summary loop = summarize(in.loop), ceiling = summarize(in.ceiling);
  char buf[512];
  std::string out = name + ": the loop against its compute ceiling (" + std::to_string(in.rounds) +
                    " rounds, interleaved, " + std::to_string(loop.n) + " windows each)\n";
  std::snprintf(buf, sizeof buf, "  loop        median %9.1f samples/s  (IQR %.1f - %.1f)\n", loop.median, loop.q1,
                loop.q3);
  out += buf;
  std::snprintf(buf, sizeof buf, "              data_wait %.3f ms, h2d %.3f ms per batch (medians)\n",
                1000.0 * in.data_wait_s, 1000.0 * in.h2d_s);
  out += buf;
  std::snprintf(buf, sizeof buf, "  ceiling     median %9.1f samples/s  (IQR %.1f - %.1f), one reused device batch\n",
                ceiling.median, ceiling.q1, ceiling.q3);
  out += buf;
  out += std::string("  verdict     ") + to_string(f.result) + ": " + f.explanation + "\n";
  for (const auto& h : f.hints) out += "  try         " + h + "\n";
  return out;
}

nlohmann::ordered_json bottleneck_json(const bottleneck_finding& f, const bottleneck_input& in,
                                       const std::string& name) {
  return {{"profile", name},
          {"verdict", to_string(f.result)},
          {"explanation", f.explanation},
          {"hints", f.hints},
          {"rounds", in.rounds},
          {"share_of_ceiling", f.share_of_ceiling},
          {"change_pct", f.row.change_pct},
          {"p_value", f.row.test.p},
          {"exact", f.row.test.exact},
          {"level", to_string(f.row.level)},
          {"assumes", level_assumption(f.row.level)},
          {"windows_to_decide",
           f.row.to_decide ? nlohmann::ordered_json(*f.row.to_decide) : nlohmann::ordered_json(nullptr)},
          {"interval", f.row.interval ? nlohmann::ordered_json{{"confidence", f.row.interval->confidence},
                                                               {"low_pct", f.row.interval->low_pct},
                                                               {"high_pct", f.row.interval->high_pct}}
                                      : nlohmann::ordered_json(nullptr)},
          {"loop_samples_per_s", {{"median", f.row.candidate_median}, {"windows", in.loop}}},
          {"ceiling_samples_per_s", {{"median", f.row.base_median}, {"windows", in.ceiling}}},
          {"loop_stages_s", {{"data_wait", in.data_wait_s}, {"h2d", in.h2d_s}, {"batch", in.batch_s}}},
          {"reports", {{"loop", "loop.json"}, {"ceiling", "ceiling.json"}}}};
}

}  // namespace trainbench
