// trainbench fusion-bench: would NVIDIA's MLPerf convolution fusions pay for this profile's model on
// this GPU? Every "batch norm, ReLU, convolution" pair of the model (model/conv_fusion.hpp), per
// distinct shape (largest share of the convolution work first), run both ways in one process,
// alternating: what backend.compile runs now against the cuDNN graphs that fold the batch norm
// into the convolutions (cuda/cudnn_conv_fusion.hpp), each checked against the reference first.
// Prints the table and what the pairs would cost per step either way; --out writes the same as
// JSON, rewritten after every shape with its status ("partial" until the end, "ok", or "error"
// with the failure), so a run stopped by a time limit or a failure keeps what it measured.
#include <ATen/Context.h>

#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trainbench/commands/commands.hpp"
#include "trainbench/config/profile_io.hpp"
#include "trainbench/cuda/cuda_stages.hpp"
#include "trainbench/cuda/cudnn_conv_fusion.hpp"
#include "trainbench/measure/stats.hpp"
#include "trainbench/model/conv_fusion.hpp"
#include "trainbench/model/fusion.hpp"
#include "trainbench/model/resnet.hpp"
#include "trainbench/pipeline.hpp"
#include "trainbench/stages/train_step.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/fs.hpp"

namespace trainbench {

namespace {

std::string shape_text(const conv_fusion_shape& s) {
  std::ostringstream os;
  os << s.c << "x" << s.h << "x" << s.w << " -> " << s.k << " " << s.r << "x" << s.r << "/" << s.g.stride;
  return os.str();
}

// The per-step total of the shapes measured right (a wrong result's speed is not counted).
struct step_total {
  double unfused_ms = 0, fused_ms = 0;
  std::size_t layers = 0;
};

// One shape's row: JSON, and a line of the table.
nlohmann::ordered_json shape_row(const conv_fusion_group& g, const conv_fusion_timing& t, step_total& total) {
  nlohmann::ordered_json row = {{"input", {g.shape.n, g.shape.c, g.shape.h, g.shape.w}},
                                {"filter", {g.shape.k, g.shape.c, g.shape.r, g.shape.r}},
                                {"stride", g.shape.g.stride},
                                {"padding", g.shape.g.padding},
                                {"layers", g.layers}};
  std::cout << "  " << std::left << std::setw(28) << shape_text(g.shape) << std::right << std::setw(7)
            << g.layers.size();
  if (!t.refused.empty()) {
    row["refused"] = t.refused;
    std::cout << "  not built: " << t.refused << std::endl;
    return row;
  }
  const double u = summarize(t.unfused_ms).median, f = summarize(t.fused_ms).median;
  row["unfused_ms"] = t.unfused_ms;
  row["fused_ms"] = t.fused_ms;
  row["unfused_median_ms"] = u;
  row["fused_median_ms"] = f;
  row["fused_over_unfused"] = f / u;
  row["max_relative_error"] = t.max_relative_error;
  row["how"] = t.how;
  if (!t.wrong.empty()) row["wrong"] = t.wrong;
  std::cout << std::fixed << std::setprecision(3) << std::setw(13) << u << std::setw(11) << f << std::setw(9) << f / u
            << std::setprecision(4) << std::setw(11) << t.max_relative_error
            << (t.wrong.empty() ? "" : "  WRONG: " + t.wrong) << std::defaultfloat << std::endl;
  if (t.wrong.empty()) {
    const double n = static_cast<double>(g.layers.size());
    total.unfused_ms += n * u;
    total.fused_ms += n * f;
    total.layers += g.layers.size();
  }
  return row;
}

// The profile's model on its CUDA device, NHWC, with the batch norms backend.compile would run.
resnet compiled_model(const profile& p, c10::Device device, const std::vector<std::int64_t>& input,
                      fusion_outcome& outcome) {
  resnet model = make_resnet(p.model.arch, p.model.num_classes, p.model.zero_init_residual);
  model->to(device);
  weights_to_channels_last(*model);
  model->train();
  fusion_request fr;
  fr.device = device;
  fr.amp = p.train.amp;
  fr.channels_last = true;
  fr.input_shape = input;
  fr.route = fused_batch_norm_route(p);
  outcome = fuse_batch_norm(model, fr);
  return model;
}

c10::Device cuda_device_of(const fusion_bench_request& r, const profile& p) {
  const c10::Device device = resolve_device(p.device);
  if (!device.is_cuda())
    throw config_error(r.config, "device",
                       "fusion-bench measures cuDNN graphs and needs a CUDA device; '" + p.device + "' is " +
                           device.str() + " here");
  if (p.train.batch_size_auto)
    throw config_error(r.config, "train.batch_size", "fusion-bench needs a number, not auto (--set train.batch_size=256)");
  return device;
}

}  // namespace

int fusion_bench_command(const fusion_bench_request& r) {
  if (r.rounds < 1 || r.calls < 1) throw input_error("fusion-bench: --rounds and --calls must be at least 1");
  const profile p = load_profile(r.config, r.sets).value;
  const c10::Device device = cuda_device_of(r, p);
  make_device_current(device);
  prepare_fusions(device);  // cuDNN's frontend reads its environment: before any thread starts
  at::globalContext().setBenchmarkCuDNN(p.backend.cudnn_benchmark);
  at::globalContext().setAllowTF32CuDNN(p.backend.tf32);
  const at::ScalarType dtype = p.train.amp == amp_mode::off ? at::kFloat : amp_dtype(p.train.amp);
  const std::vector<std::int64_t> input{p.train.batch_size, 3, p.data.image_size, p.data.image_size};
  fusion_outcome outcome;
  resnet model = compiled_model(p, device, input, outcome);
  const std::vector<conv_fusion_site> sites = conv_fusion_sites(model, input);
  const std::vector<conv_fusion_group> groups = conv_fusion_groups(sites, dtype);

  nlohmann::ordered_json out = {{"status", "partial"},
                                {"arch", p.model.arch},
                                {"batch", p.train.batch_size},
                                {"image_size", p.data.image_size},
                                {"dtype", c10::toString(dtype)},
                                {"device", cuda_device_name(device)},
                                {"unfused_batch_norm", outcome.applied},
                                {"unfused_batch_norm_notes", outcome.ineffective},
                                {"rounds", r.rounds},
                                {"calls", r.calls},
                                {"autotune", r.autotune},
                                {"shapes", nlohmann::json::array()}};
  const auto save = [&] {
    if (!r.out.empty()) write_file_atomic(r.out, out.dump(2) + "\n");
  };
  std::cout << "fusion-bench: " << p.model.arch << ", batch " << p.train.batch_size << ", " << p.data.image_size
            << " px, " << c10::toString(dtype) << ", " << sites.size() << " batch norm + ReLU -> convolution pairs in "
            << groups.size() << " shapes\n"
            << "  unfused side (what backend.compile runs): "
            << (outcome.applied.empty() ? std::string("PyTorch's batch norm, ReLU") : outcome.applied.front()) << "\n"
            << "  " << std::left << std::setw(28) << "input -> filter/stride" << std::right << std::setw(7) << "layers"
            << std::setw(13) << "unfused ms" << std::setw(11) << "fused ms" << std::setw(9) << "ratio" << std::setw(11)
            << "rel. error" << "\n";
  step_total total;
  try {
    for (const conv_fusion_group& g : groups) {
      out["shapes"].push_back(shape_row(
          g, time_conv_fusion(g.shape, g.conv->weight, *model->batch_norm_ops_in_use(), r.rounds, r.calls, r.autotune),
          total));
      save();
    }
  } catch (const std::exception& e) {
    out["status"] = "error";
    out["error"] = e.what();
    save();
    throw;
  }
  out["status"] = "ok";
  out["per_step"] = {{"layers", sites.size()},
                     {"measured_layers", total.layers},
                     {"unfused_ms", total.unfused_ms},
                     {"fused_ms", total.fused_ms},
                     {"saved_ms", total.unfused_ms - total.fused_ms}};
  save();
  std::cout << std::fixed << std::setprecision(2) << "  per step, " << total.layers << " of " << sites.size()
            << " pairs measured: unfused " << total.unfused_ms << " ms, fused " << total.fused_ms << " ms";
  if (total.unfused_ms > 0)
    std::cout << " (" << 100.0 * (total.unfused_ms - total.fused_ms) / total.unfused_ms
              << "% of these layers' time saved)";
  std::cout << std::defaultfloat << std::endl;
  return exit_code::ok;
}

}  // namespace trainbench
