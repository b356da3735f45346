#pragma once
// What run and bottleneck share: the report's context, the console summary, progress, and the
// one place where a failure becomes a report status and an exit code.
#include <optional>
#include <string>

#include "trainbench/config/profile_io.hpp"
#include "trainbench/pipeline.hpp"
#include "trainbench/report/report.hpp"

namespace trainbench {

context_info full_context(const std::string& command_line, const effective_settings& e, const profile& p);
void print_summary(const report_input& in);
// Warnings a number needs to be read right: noisy windows (results.noise), skipped fp16 steps.
void warn_about_result(const report_input& in);
progress_fn make_progress(bool quiet);
// Fills the report's status from the exception in flight; returns the exit code.
int record_failure(report_input& in);
// Bad input (profile, data, switches refused by --strict) is rethrown naming the profile's file:
// exit 2, no report. Any other failure is recorded in the report and leaves no pipeline.
std::optional<pipeline> build_for_report(const loaded_profile& lp, const profile& p, const build_options& bo,
                                         report_input& in, int& code);
void log_settings(const profile& p, const effective_settings& e);
// Finishes a trace file (also after a failed run: it holds the windows that completed); a write
// error fails the run. Returns the exit code.
int close_trace(trace_recorder& trace, report_input& in, int code);

}  // namespace trainbench
